package engine

import (
	"context"
	"errors"
	"time"

	"github.com/redis/rueidis"
	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/resp"
	"github.com/shardcast/shardcast/internal/subconn"
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

// WireSettle bounds how long a command's I/O error waits for the
// connection to be declared gone: a command can fail on a write before the
// connection's reader has noticed the broken socket and closed Done.
const WireSettle = time.Second

// IsIOError reports whether err means the connection itself failed, as
// opposed to a Redis error reply or an expired context.
func IsIOError(err error) bool {
	if err == nil {
		return false
	}
	if _, ok := resp.IsServerError(err); ok {
		return false
	}
	if _, ok := rueidis.IsRedisErr(err); ok {
		return false
	}
	return !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

// WireFailed reports whether err, returned by a command on conn, means the
// wire is gone. For an I/O error it waits (bounded by ctx, closing and
// WireSettle) for conn to confirm, so that a caller waits for the
// reconnect instead of failing with a transient network error.
func WireFailed(ctx context.Context, conn *subconn.Conn, err error, closing <-chan struct{}) bool {
	if !conn.Alive() {
		return true
	}
	if !IsIOError(err) || ctx.Err() != nil {
		return false
	}
	settle := time.NewTimer(WireSettle)
	defer settle.Stop()
	select {
	case <-conn.Done():
		return true
	case <-ctx.Done():
	case <-settle.C:
	case <-closing:
	}
	return !conn.Alive()
}
