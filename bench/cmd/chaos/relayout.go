package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/shardcast/shardcast"
)

// relayoutHeartbeat is the Agreement.Heartbeat of the soak's brokers and
// coordinator: it paces a re-layout's phases (about one heartbeat each).
const relayoutHeartbeat = 500 * time.Millisecond

// relayoutTimeout bounds one re-layout; past it the coordinator aborts,
// returning every broker to the old layout.
const relayoutTimeout = time.Minute

// relayouter moves the soak's brokers to the other of the engine's two
// layouts and back (see relayoutFault).
type relayouter struct {
	// run moves the fleet to the layout it is not on; abort returns it
	// from a re-layout left under way; describe names the layout the
	// brokers are on.
	run      func(ctx context.Context) (shardcast.RelayoutReport, error)
	abort    func(ctx context.Context) error
	describe func() string

	mu                          sync.Mutex
	completed, aborted, cleared int
	failed                      int            // neither completed nor aborted, nor cleared after
	during                      map[string]int // the fault injected mid-way, by name
}

// relayoutFault is the "relayout" fault: an online re-layout of the
// soak's brokers (both of them, the publisher and the subscriber) while
// the traffic flows, and, two times in three, another of the selected
// faults injected 0-2 s after it began: a Redis fault mid-transition. A
// re-layout that aborts counts as run; the soak's check holds it to the
// same promises as every fault (every loss inside a reported window, no
// duplicate, no reorder). One that fails otherwise (the coordinator gave
// up) is aborted, so that the soak goes on, and reported as failed.
func (rl *relayouter) fault(others []string, faults map[string]fault, rng *rand.Rand) fault {
	rl.during = make(map[string]int)
	return func(ctx context.Context) error {
		var other string
		if len(others) > 0 && rng.IntN(3) > 0 {
			other = others[rng.IntN(len(others))]
		}
		delay := time.Duration(rng.IntN(2000)) * time.Millisecond
		type result struct {
			rep shardcast.RelayoutReport
			err error
		}
		done := make(chan result, 1)
		rctx, cancel := context.WithTimeout(ctx, relayoutTimeout)
		defer cancel()
		logf("  re-layout from %s", rl.describe())
		go func() {
			rep, err := rl.run(rctx)
			done <- result{rep, err}
		}()
		var ferr error
		if other != "" {
			_ = sleepCtx(ctx, delay) // ended early, the fault's own ctx says so
			logf("  %s during the re-layout", other)
			ferr = faults[other](ctx)
			if ferr != nil {
				ferr = fmt.Errorf("%s during the re-layout: %w", other, ferr)
			}
		}
		r := <-done
		var phases []string
		for _, p := range r.rep.Phases {
			phases = append(phases, fmt.Sprintf("%s %v", p.Phase, p.Took.Round(time.Millisecond)))
		}
		logf("  re-layout phases: %s; now on %s", strings.Join(phases, ", "), rl.describe())
		rl.mu.Lock()
		defer rl.mu.Unlock()
		if other != "" {
			rl.during[other]++
		}
		switch {
		case r.err == nil:
			rl.completed++
		case errors.Is(r.err, shardcast.ErrRelayoutAborted):
			rl.aborted++
			logf("  re-layout aborted: %v", r.err)
		default:
			logf("  re-layout failed: %v; aborting what is left of it", r.err)
			actx, acancel := context.WithTimeout(context.Background(), relayoutTimeout)
			aerr := rl.abort(actx)
			acancel()
			if aerr == nil || errors.Is(aerr, shardcast.ErrNoRelayout) {
				rl.cleared++
			} else {
				rl.failed++
				return errors.Join(ferr, r.err, aerr)
			}
		}
		return ferr
	}
}

// summary is the re-layout line of the report.
func (rl *relayouter) summary() string {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	var during []string
	for _, name := range slices.Sorted(maps.Keys(rl.during)) {
		during = append(during, fmt.Sprintf("%s×%d", name, rl.during[name]))
	}
	return fmt.Sprintf("%d completed, %d aborted, %d failed and aborted after, %d left failed; a fault mid-way: %s; ended on %s",
		rl.completed, rl.aborted, rl.cleared, rl.failed, strings.Join(during, " "), rl.describe())
}
