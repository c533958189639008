package engine

import (
	"context"
	"time"

	"github.com/shardcast/shardcast"
)

// Turn serialises the subscribe, unsubscribe and resubscribe commands of
// one subscribe path (a sharded connection, a cluster partition), so that
// Redis sees one channel's commands in call order and the wanted set
// matches what Redis confirmed. It is a channel so that waiting for it
// honours a context.
type Turn chan struct{}

// NewTurn returns a free turn.
func NewTurn() Turn { return make(Turn, 1) }

// Lock takes the turn, or returns ctx's error, or shardcast.ErrClosed once
// closing is closed.
func (t Turn) Lock(ctx context.Context, closing <-chan struct{}) error {
	select {
	case t <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-closing:
		return shardcast.ErrClosed
	}
}

// Unlock releases the turn.
func (t Turn) Unlock() { <-t }

// Finish runs op, which sends commands, on behalf of a caller holding the
// turn, and takes the turn over: op releases it when done, so later calls
// still reach Redis after op. The caller waits bounded by ctx and gets
// op's error, or nil if ctx ended first; op itself runs on g, bounded by
// timeout and parent (which ends on Close). Once g is closed it releases
// the turn and returns shardcast.ErrClosed without running op.
func (t Turn) Finish(ctx context.Context, g *Background, parent context.Context, timeout time.Duration, op func(context.Context) error) error {
	done := make(chan error, 1)
	started := g.Go(func() {
		defer t.Unlock()
		opCtx, cancel := context.WithTimeout(parent, timeout)
		defer cancel()
		done <- op(opCtx)
	})
	if !started {
		t.Unlock() // Close has begun and closes the connection anyway
		return shardcast.ErrClosed
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return nil
	}
}
