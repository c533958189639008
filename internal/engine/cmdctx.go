package engine

import "context"

type commandCtxKey struct{}

// WithCommandContext returns ctx carrying cmd, the context the subscribe
// commands a call sends are bounded by, while ctx bounds its waits (for a
// path's turn, for a connection). A re-layout step cuts the waits of the
// calls it preempts short (see relayout.Gate), but must not cut a command
// already on its way: a write cut short leaves the stream in an unknown
// state, and closes the connection every path on it shares.
func WithCommandContext(ctx, cmd context.Context) context.Context {
	return context.WithValue(ctx, commandCtxKey{}, cmd)
}

// commandContext returns the context a call's commands are bounded by.
func commandContext(ctx context.Context) context.Context {
	if c, ok := ctx.Value(commandCtxKey{}).(context.Context); ok {
		return c
	}
	return ctx
}
