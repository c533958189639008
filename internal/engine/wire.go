package engine

import (
	"context"
	"errors"
	"time"

	"github.com/shardcast/shardcast/internal/resp"
	"github.com/shardcast/shardcast/internal/subconn"
)

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
