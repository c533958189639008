package engine

import (
	"context"
	"sync"
	"sync/atomic"
)

// Async is a broker's PublishAsync state: the room that bounds its
// messages in flight and how a failed outcome is reported. Init it
// before the first Start.
type Async struct {
	room AsyncRoom
	core *Core
	// failed turns a failed outcome into the error done hears; where is
	// what the engine set on the call (SetWhere).
	failed func(where string, err error) error
}

// Init sets the broker's core and its failure mapping.
func (x *Async) Init(core *Core, failed func(where string, err error) error) {
	x.core, x.failed = core, failed
}

// Start checks the message as Publish does, waits for room for it
// (bounded by ctx and Close) and returns its call, which the engine
// routes and hands to a connection with Finish, or gives up with
// Abandon.
func (x *Async) Start(ctx context.Context, channel string, payload []byte, done func(error)) (*AsyncCall, error) {
	if err := x.core.CheckPublish(ctx, channel, payload); err != nil {
		return nil, err
	}
	if err := x.room.Take(ctx, x.core.Options.MaxAsyncPublishes, x.core.Closing()); err != nil {
		return nil, err
	}
	a := asyncCalls.Get().(*AsyncCall)
	a.x, a.done = x, done
	return a, nil
}

// AsyncCall is one message of PublishAsync in flight: what its outcome
// must update. Pooled, with its finish bound once, so that a steady
// stream of calls allocates nothing.
type AsyncCall struct {
	x        *Async
	inflight *atomic.Int64 // a re-layout's count of moving messages, or nil
	where    string
	done     func(error)
	fn       func(error) // finish, bound when the call was made
}

var asyncCalls sync.Pool

func init() {
	// Set here: the pool's New refers to finish, which refers to the pool.
	asyncCalls.New = func() any {
		a := &AsyncCall{}
		a.fn = a.finish
		return a
	}
}

// Count makes the call count in n until it finishes: a moving channel's
// message during an online re-layout, which the engine has already
// added to n.
func (a *AsyncCall) Count(n *atomic.Int64) { a.inflight = n }

// SetWhere records where the message went, for the failure mapping.
func (a *AsyncCall) SetWhere(where string) { a.where = where }

// Finish returns the function the connection calls once with the
// message's outcome; from then on the call belongs to the connection.
func (a *AsyncCall) Finish() func(error) { return a.fn }

// Abandon undoes the call when its message was not queued: the room, the
// re-layout count and the call go back.
func (a *AsyncCall) Abandon() { a.release() }

// finish is the outcome of the call's message, on the connection's reader.
func (a *AsyncCall) finish(err error) {
	x, where, done := a.x, a.where, a.done
	a.release()
	if err == nil {
		x.core.Published()
	} else {
		err = x.failed(where, err)
	}
	if done != nil {
		done(err)
	}
}

// release gives back the call's room and re-layout count, and the call.
func (a *AsyncCall) release() {
	x, n := a.x, a.inflight
	*a = AsyncCall{fn: a.fn}
	asyncCalls.Put(a)
	if n != nil {
		n.Add(-1)
	}
	x.room.Give()
}
