package relayout

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/agreement"
)

// Barrier sends a re-layout's barrier through one old instance or
// partition that loses channels; nil means Redis accepted it.
type Barrier func(ctx context.Context) error

// sendAll sends every barrier at once, so that one to a frozen node does
// not use up ctx before the others are sent, and returns how many Redis
// accepted.
func sendAll(ctx context.Context, barriers []Barrier) int {
	var n atomic.Int64
	var wg sync.WaitGroup
	for _, send := range barriers {
		wg.Go(func() {
			if send(ctx) == nil {
				n.Add(1)
			}
		})
	}
	wg.Wait()
	return int(n.Load())
}

// Mover is an engine's side of one coordinator run: where the agreement's
// scripts run, which layout the run moves to, and the barriers it sends.
type Mover interface {
	// Run executes the agreement's scripts.
	Run(ctx context.Context, s *shardcast.Script, keys, args []string) (any, error)
	// Target returns the layout to move to from the recorded one, or an
	// error that refuses the move before anything changes.
	Target(from shardcast.LayoutRecord) (shardcast.LayoutRecord, error)
	// Barriers returns a send through each instance or partition of from
	// that loses channels in transition t; an error aborts the run.
	Barriers(from shardcast.LayoutRecord, t *agreement.Transition) ([]Barrier, error)
	// Close closes what the run opened.
	Close()
}

// Relayout is an engine's Relayout: it checks a, opens the engine's side
// (open), reads the layout record, begins (or resumes) the transition to
// the layout the engine names for it, and drives it to the end (see
// Coordinator.Drive); onPhase, if set, is called as each phase completes.
// It fails with shardcast.ErrNoLayoutRecord when there is no record.
func Relayout(ctx context.Context, a shardcast.Agreement, onPhase func(shardcast.RelayoutPhaseReport), open func(context.Context) (Mover, error)) (shardcast.RelayoutReport, error) {
	var rep shardcast.RelayoutReport
	c, m, err := openMover(ctx, a, open)
	if err != nil {
		return rep, err
	}
	defer m.Close()
	c.OnPhase = onPhase
	st, err := agreement.Read(ctx, c.Run, c.Agreement)
	if err != nil {
		return rep, err
	}
	if st.Record == nil {
		return rep, fmt.Errorf("%w in %s (App %q)", shardcast.ErrNoLayoutRecord, c.Agreement.RecordKey(), c.Agreement.App)
	}
	rep.From = *st.Record
	if rep.To, err = m.Target(*st.Record); err != nil {
		return rep, err
	}
	t, begun, err := c.Begin(ctx, rep.To)
	if err != nil {
		begun.From = rep.From
		return begun, err
	}
	rep = begun
	barriers, err := m.Barriers(rep.From, t)
	if err != nil {
		abortCtx, cancel := c.abortContext(ctx)
		defer cancel()
		return rep, errors.Join(err, c.Abort(abortCtx, t, &rep))
	}
	return rep, c.Drive(ctx, t, &rep, barriers)
}

// AbortRelayout is an engine's AbortRelayout: it aborts the re-layout
// under way over the engine's side (open) and waits until every live
// broker acknowledged, bounded by ctx (see Coordinator.AbortCurrent).
func AbortRelayout(ctx context.Context, a shardcast.Agreement, open func(context.Context) (Mover, error)) error {
	c, m, err := openMover(ctx, a, open)
	if err != nil {
		return err
	}
	defer m.Close()
	return c.AbortCurrent(ctx)
}

// openMover checks a, then opens the engine's side and returns a
// coordinator over it, named for this process.
func openMover(ctx context.Context, a shardcast.Agreement, open func(context.Context) (Mover, error)) (*Coordinator, Mover, error) {
	if err := checkAgreement(a); err != nil {
		return nil, nil, err
	}
	m, err := open(ctx)
	if err != nil {
		return nil, nil, err
	}
	return &Coordinator{Agreement: a.WithDefaults(), Run: m.Run, Name: NewName()}, m, nil
}
