package relayout

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/engine"
)

// Gate lets Subscribe and Unsubscribe calls run side by side (enter) and
// keeps them out while an online re-layout changes which paths a channel
// is wanted on (Lock): a call must not group its channels by one routing
// and add them after the re-layout listed the channels under the next.
// Every wait honours its ctx and ends when the broker closes.
//
// A call that is still in when a re-layout step wants the Gate gets
// PreemptAfter to finish; then its waits (for a path's turn, for a
// connection) are cut short, what it added is undone, and it starts
// again, grouped by the new routing, once the step is over. Commands it
// already sends run to their end: cut mid-write, they would close a
// connection other paths share. So a Subscribe with no deadline waiting
// for an instance that died does not hold the Gate while the instance
// stays down, and a re-layout away from it (the way to replace it) takes
// its steps.
type Gate struct {
	mu      sync.Mutex
	readers map[*reader]struct{}
	writer  bool
	changed chan struct{}
}

// reader is a call inside the Gate.
type reader struct {
	cancel context.CancelCauseFunc
}

// PreemptAfter is how long a re-layout step waits for the calls in the
// Gate before it cuts their waits short. A call to a live Redis usually
// finishes within it; one that waits longer waits for a connection or a
// failover, or sends a large batch (which the step then waits for).
const PreemptAfter = 100 * time.Millisecond

// errPreempted is the cause given to the ctx of a call a re-layout step
// cut short; the call starts again after the step.
var errPreempted = errors.New("shardcast: cut short by a re-layout step; starting again")

func (g *Gate) wait(ctx context.Context, closing <-chan struct{}, ch <-chan struct{}) error {
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-closing:
		return shardcast.ErrClosed
	}
}

// signal wakes every waiter; the caller holds g.mu.
func (g *Gate) signal() {
	if g.changed != nil {
		close(g.changed)
		g.changed = nil
	}
}

// waitChan returns the channel the next change closes; the caller holds
// g.mu.
func (g *Gate) waitChan() <-chan struct{} {
	if g.changed == nil {
		g.changed = make(chan struct{})
	}
	return g.changed
}

// enter admits a call unless a re-layout step holds the Gate. It returns
// the ctx the call runs with (a step may cut it short, see Gate) and the
// reader to pass to exit.
func (g *Gate) enter(ctx context.Context, closing <-chan struct{}) (context.Context, *reader, error) {
	for {
		g.mu.Lock()
		if !g.writer {
			inner, cancel := context.WithCancelCause(ctx)
			r := &reader{cancel: cancel}
			if g.readers == nil {
				g.readers = make(map[*reader]struct{})
			}
			g.readers[r] = struct{}{}
			g.mu.Unlock()
			// Only the call's waits are cut short: the commands it sent
			// run to their end (or ctx's), see engine.WithCommandContext.
			return engine.WithCommandContext(inner, ctx), r, nil
		}
		ch := g.waitChan()
		g.mu.Unlock()
		if err := g.wait(ctx, closing, ch); err != nil {
			return nil, nil, err
		}
	}
}

// exit ends a call enter admitted.
func (g *Gate) exit(r *reader) {
	r.cancel(nil)
	g.mu.Lock()
	delete(g.readers, r)
	g.signal()
	g.mu.Unlock()
}

// Lock waits until no call is in and keeps new ones out until Unlock. The
// calls still in after PreemptAfter are cut short (see Gate).
func (g *Gate) Lock(ctx context.Context, closing <-chan struct{}) error {
	for {
		g.mu.Lock()
		if !g.writer {
			g.writer = true
			g.mu.Unlock()
			break
		}
		ch := g.waitChan()
		g.mu.Unlock()
		if err := g.wait(ctx, closing, ch); err != nil {
			return err
		}
	}
	preempt := time.NewTimer(PreemptAfter)
	defer preempt.Stop()
	for {
		g.mu.Lock()
		if len(g.readers) == 0 {
			g.mu.Unlock()
			return nil
		}
		ch := g.waitChan()
		g.mu.Unlock()
		select {
		case <-preempt.C:
			g.mu.Lock()
			for r := range g.readers {
				r.cancel(errPreempted)
			}
			g.mu.Unlock()
		case <-ch:
		case <-ctx.Done():
			g.Unlock()
			return ctx.Err()
		case <-closing:
			g.Unlock()
			return shardcast.ErrClosed
		}
	}
}

// Unlock lets calls in again.
func (g *Gate) Unlock() {
	g.mu.Lock()
	g.writer = false
	g.signal()
	g.mu.Unlock()
}

// run runs op inside the Gate, and again, grouped afresh, each time a
// re-layout step cuts it short.
func (g *Gate) run(ctx context.Context, closing <-chan struct{}, op func(ctx context.Context) error) error {
	for {
		inner, r, err := g.enter(ctx, closing)
		if err != nil {
			return err
		}
		err = op(inner)
		preempted := errors.Is(context.Cause(inner), errPreempted)
		g.exit(r)
		if err == nil || !preempted {
			return err
		}
		if ctx.Err() != nil {
			// The caller's ctx ended while the call, cut short, undid
			// what it added: report the caller's error (a deadline),
			// not the cancellation of the step.
			if errors.Is(err, shardcast.ErrClosed) {
				return err
			}
			return fmt.Errorf("%w (a re-layout step had cut the call short: %v)", ctx.Err(), err)
		}
	}
}

// Routing is the core's hook over a gate (engine.Routing): Group groups
// a call's channels by the routing in force, read inside the gate, so
// that a re-layout step cannot change it before the call ends; closing
// ends the waits when the broker closes.
type Routing struct {
	Gate    *Gate
	Closing <-chan struct{}
	Group   func(channels []string) []shardcast.Group
}

var _ engine.Routing = Routing{}

// Groups groups channels by the paths they are wanted on.
func (r Routing) Groups(channels []string) []shardcast.Group { return r.Group(channels) }

// Run runs op inside the gate, and again each time a re-layout step cuts
// it short (see Gate).
func (r Routing) Run(ctx context.Context, op func(ctx context.Context) error) error {
	return r.Gate.run(ctx, r.Closing, op)
}
