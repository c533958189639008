package relayout

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/agreement"
	"github.com/shardcast/shardcast/internal/layoutkey"
)

// Coordinator steps the fleet of an application through a re-layout:
// it begins (or resumes) the transition, waits at each phase until every
// live broker acknowledged, and aborts when asked or when its ctx ends
// before the finish. The engines supply the new layout and the barriers.
type Coordinator struct {
	// Agreement names the application; its Heartbeat paces the polls.
	Agreement shardcast.Agreement
	// Run executes the agreement's scripts.
	Run agreement.Runner
	// Name says who coordinates, in the transition record.
	Name string
	// OnPhase, if set, is called as each phase completes.
	OnPhase func(shardcast.RelayoutPhaseReport)
	// WithoutBrokers lets the phases advance when no broker is live. By
	// default the coordinator waits for one: an empty registry is more
	// likely one that has not refilled than a fleet that is gone, and if
	// the fleet is gone, the ctx ends and the abort ends the transition
	// without anyone.
	WithoutBrokers bool
}

// NewName returns a coordinator name for this process.
func NewName() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("relayout:%s/%d", host, os.Getpid())
}

// Begin starts a re-layout to layout to, or resumes the one under way to
// it. It fails with shardcast.ErrRelayoutInProgress when another
// re-layout is under way.
func (c *Coordinator) Begin(ctx context.Context, to shardcast.LayoutRecord) (*agreement.Transition, shardcast.RelayoutReport, error) {
	rep := shardcast.RelayoutReport{To: to}
	id := newID()
	res, err := agreement.Begin(ctx, c.Run, c.Agreement, id, c.Name, to)
	rep.From = res.From
	if err != nil {
		return nil, rep, err
	}
	t := res.Current
	if res.Begun {
		// What it wrote, rather than a read that could fail and leave
		// the transition behind.
		t = &agreement.Transition{ID: id, Phase: shardcast.PhasePrepare, From: res.From.Fingerprint,
			To: to.Fingerprint, ToRecord: to, Barrier: layoutkey.Barrier(c.Agreement, id), Coordinator: c.Name}
	} else if t == nil || t.To != to.Fingerprint {
		desc := ""
		if t != nil {
			desc = fmt.Sprintf(" (%s, to %s, phase %s)", t.ID, t.ToRecord.Description, t.Phase)
		}
		return nil, rep, fmt.Errorf("%w%s", shardcast.ErrRelayoutInProgress, desc)
	}
	rep.ID = t.ID
	return t, rep, nil
}

// Drive takes transition t from its phase to the end. Before every poll
// of the drain phase it sends every barrier at once (see sendAll). If ctx
// ends before the finish, or the transition was aborted, it aborts
// (waiting for every broker past ctx's end, see abortContext) and
// returns an error wrapping shardcast.ErrRelayoutAborted; if the
// transition vanishes, it returns at once with one wrapping
// shardcast.ErrRelayoutVanished. A phase waits, besides for every live
// broker's acknowledgement, for the registry to refill after the control
// instance was unreachable, and for a live broker (see
// agreement.Advance).
func (c *Coordinator) Drive(ctx context.Context, t *agreement.Transition, rep *shardcast.RelayoutReport, barriers []Barrier) error {
	steps := []struct{ from, to string }{
		{shardcast.PhasePrepare, shardcast.PhaseSwitch},
		{shardcast.PhaseSwitch, shardcast.PhaseDrain},
		{shardcast.PhaseDrain, shardcast.PhaseFinish},
		{shardcast.PhaseFinish, "done"},
	}
	for len(steps) > 0 && steps[0].from != t.Phase {
		steps = steps[1:] // resume where the transition is
	}
	if t.Phase == shardcast.PhaseAbort {
		return errors.Join(shardcast.ErrRelayoutAborted, c.Abort(ctx, t, rep))
	}
	for _, s := range steps {
		var each []Barrier
		if s.from == shardcast.PhaseDrain {
			each = barriers
		}
		pr, err := c.await(ctx, t, s.from, s.to, each)
		if err != nil {
			if errors.Is(err, shardcast.ErrRelayoutAborted) || (ctx.Err() != nil && s.from != shardcast.PhaseFinish) {
				abortCtx, cancel := c.abortContext(ctx)
				abortErr := c.Abort(abortCtx, t, rep)
				cancel()
				return errors.Join(shardcast.ErrRelayoutAborted, err, abortErr)
			}
			if s.from == shardcast.PhaseFinish && ctx.Err() != nil {
				// Past the point of no return: the record may hold the
				// new layout already; the same Relayout resumes.
				return fmt.Errorf("%w; the finish is incomplete: run the same re-layout again to resume it", err)
			}
			return err
		}
		rep.Phases = append(rep.Phases, pr)
		if c.OnPhase != nil {
			c.OnPhase(pr)
		}
	}
	return nil
}

// abortContext bounds the abort that follows the end of ctx: ctx's
// values without its end, for abortWait heartbeats (at least
// minAbortWait). That covers a refill, every live broker's acknowledgement
// and the expiry of dead ones many times over; past it the abort stays
// recorded, brokers still roll back on their own, and running the same
// re-layout again, or an abort, waits for the rest.
func (c *Coordinator) abortContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), max(abortWait*c.Agreement.Heartbeat, minAbortWait))
}

// abortWait (in heartbeats) and minAbortWait bound the abort a coordinator
// runs after its ctx ended (see abortContext); tests shorten minAbortWait.
const abortWait = 30

var minAbortWait = 15 * time.Second

// AbortCurrent aborts the re-layout under way and waits until every live
// broker acknowledged, bounded by ctx.
func (c *Coordinator) AbortCurrent(ctx context.Context) error {
	st, err := agreement.ReadTransition(ctx, c.Run, c.Agreement)
	if err != nil {
		return err
	}
	if st.T == nil {
		return fmt.Errorf("%w in %s", shardcast.ErrNoRelayout, layoutkey.Transition(c.Agreement))
	}
	var rep shardcast.RelayoutReport
	return c.Abort(ctx, st.T, &rep)
}

// await polls, every half heartbeat, until every live broker acknowledged
// phase from, then moves the transition to phase to. each (the drain's
// barriers) is sent before every poll, bounded by a quarter
// heartbeat: the poll waits for it, and the advance script takes a gap of
// more than a heartbeat between polls for an outage of the control record
// (it then refills rather than advances), so barriers sent to a frozen
// node, each waiting ReplyTimeout, would keep the drain from ever ending.
func (c *Coordinator) await(ctx context.Context, t *agreement.Transition, from, to string, each []Barrier) (shardcast.RelayoutPhaseReport, error) {
	start := time.Now()
	pr := shardcast.RelayoutPhaseReport{Phase: from}
	tick := time.NewTicker(max(c.Agreement.Heartbeat/2, time.Millisecond))
	defer tick.Stop()
	var last agreement.AdvanceResult // what the last poll still waited for
	for {
		if len(each) > 0 {
			bctx, cancel := context.WithTimeout(ctx, c.Agreement.Heartbeat/4)
			pr.Barriers += sendAll(bctx, each)
			cancel()
		}
		st, err := agreement.ReadTransition(ctx, c.Run, c.Agreement)
		if err == nil {
			pr.Brokers = len(st.Live)
			var res agreement.AdvanceResult
			res, err = agreement.Advance(ctx, c.Run, c.Agreement, t, from, to, c.Name, c.WithoutBrokers)
			if err == nil && res.Advanced {
				pr.Took = time.Since(start)
				return pr, nil
			}
			if err == nil {
				last = res
			}
		}
		if err != nil && (errors.Is(err, shardcast.ErrRelayoutAborted) || errors.Is(err, shardcast.ErrRelayoutVanished) || ctx.Err() != nil) {
			return pr, waitedFor(err, from, last)
		}
		select {
		case <-ctx.Done():
			return pr, waitedFor(ctx.Err(), from, last)
		case <-tick.C:
		}
	}
}

// waitedFor adds to err, when ctx ended a phase, what the phase was still
// waiting for by the last poll.
func waitedFor(err error, phase string, last agreement.AdvanceResult) error {
	if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
		return err
	}
	switch {
	case len(last.Waiting) > 0:
		return fmt.Errorf("%w (phase %s: waiting for the acknowledgement of brokers %v)", err, phase, last.Waiting)
	case last.Refilling > 0:
		return fmt.Errorf("%w (phase %s: the registry was refilling after a gap in the coordinator's calls, %v to go)", err, phase, last.Refilling.Round(time.Millisecond))
	case last.NoBroker:
		return fmt.Errorf("%w (phase %s: no broker is live)", err, phase)
	}
	return fmt.Errorf("%w (phase %s)", err, phase)
}

// Abort turns t into an abort and waits until every live broker
// acknowledged it, then ends the transition.
func (c *Coordinator) Abort(ctx context.Context, t *agreement.Transition, rep *shardcast.RelayoutReport) error {
	rep.Aborted = true
	if _, err := agreement.Abort(ctx, c.Run, c.Agreement, t.ID); err != nil {
		return err
	}
	pr, err := c.await(ctx, t, shardcast.PhaseAbort, "done", nil)
	if err == nil {
		rep.Phases = append(rep.Phases, pr)
	}
	return err
}

func newID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return time.Now().UTC().Format("20060102T150405Z") + "-" + hex.EncodeToString(b[:])
}
