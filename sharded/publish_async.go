package sharded

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/shardcast/shardcast"
)

var _ shardcast.AsyncPublisher = (*Broker)(nil)

// PublishAsync sends payload to channel's shard with PUBLISH, like
// Publish, but returns once the message is queued: done hears the
// outcome (see shardcast.AsyncPublisher for the whole contract). Calls
// share writes with Publish on the shard's connection; while earlier
// messages await their replies, later ones gather and go out together
// when the replies come, so many messages in flight cost few syscalls
// and no parked goroutine each.
//
// At most Options.MaxAsyncPublishes messages are in flight per broker; a
// call beyond it waits for room, bounded by ctx. done runs on the
// shard connection's reader goroutine: it must not block, nor call
// Publish. Calls from one goroutine on one channel are sent in call
// order. During an online re-layout a moving channel's message counts
// as in flight under its route until done, as Publish's does.
func (b *Broker) PublishAsync(ctx context.Context, channel string, payload []byte, done func(error)) error {
	if err := b.core.CheckPublish(ctx, channel, payload); err != nil {
		return err
	}
	if err := b.async.Take(ctx, b.core.Options.MaxAsyncPublishes, b.core.Closing()); err != nil {
		return err
	}
	a := asyncCalls.Get().(*asyncCall)
	a.b, a.done = b, done
	if strings.HasPrefix(channel, shardcast.ProbeChannelPrefix) {
		return a.send(ctx, b.probeSlot(channel), channel, payload)
	}
	for {
		r := b.route.Load()
		i, moving := r.publishSlot(channel)
		if moving {
			r.inflight.Add(1)
			if b.route.Load() != r {
				r.inflight.Add(-1)
				continue
			}
			a.route = r
		}
		return a.send(ctx, i, channel, payload)
	}
}

// asyncCall is one message of PublishAsync in flight: what its outcome
// must update. Pooled, with its finish bound once, so that a steady
// stream of calls allocates nothing.
type asyncCall struct {
	b     *Broker
	route *route // counted in route.inflight until finished; nil if not
	addr  string
	done  func(error)
	fn    func(error) // finish, bound when the call was made
}

var asyncCalls sync.Pool

func init() {
	// Set here: the pool's New refers to finish, which refers to the pool.
	asyncCalls.New = func() any {
		a := &asyncCall{}
		a.fn = a.finish
		return a
	}
}

// send queues the message on slot i's connection; on a refusal it undoes
// what PublishAsync took and returns the error as Publish would.
func (a *asyncCall) send(ctx context.Context, i int, channel string, payload []byte) error {
	b := a.b
	sh := b.slots[i].Load()
	var err error
	if sh == nil {
		err = fmt.Errorf("shardcast: publish %q: no instance in slot %d", channel, i)
	} else {
		a.addr = sh.addr
		err = sh.pub.PublishAsync(ctx, channel, payload, b.core.Options.Raw, time.Now(), a.fn)
		if err != nil {
			err = b.publishErr(sh.addr, err)
		}
	}
	if err == nil {
		return nil // a belongs to the connection until finish
	}
	a.release()
	return err
}

// finish is the outcome of the call's message, on the connection's reader.
func (a *asyncCall) finish(err error) {
	b, addr, done := a.b, a.addr, a.done
	a.release()
	if err == nil {
		b.core.Published()
	} else {
		err = b.publishErr(addr, err)
	}
	if done != nil {
		done(err)
	}
}

// release gives back the call's room and route count, and the call.
func (a *asyncCall) release() {
	b, r := a.b, a.route
	*a = asyncCall{fn: a.fn}
	asyncCalls.Put(a)
	if r != nil {
		r.inflight.Add(-1)
	}
	b.async.Give()
}

// publishErr is the error Publish returns for a failed publish to addr.
func (b *Broker) publishErr(addr string, err error) error {
	if b.core.Closed() {
		return shardcast.ErrClosed // Close cut the call short
	}
	return fmt.Errorf("shardcast: publish to shard %s: %w", addr, err)
}
