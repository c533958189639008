package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/pubconn"
)

var _ shardcast.AsyncPublisher = (*Broker)(nil)

// PublishAsync sends payload to channel's partition with SPUBLISH, like
// Publish, but returns once the message is queued on the connection to
// the partition's master: done hears the outcome (see
// shardcast.AsyncPublisher for the whole contract). While earlier
// messages await their replies, later ones gather and go out together
// when the replies come.
//
// Unlike Publish it does not follow the cluster's redirections itself:
// resending a message that met a slot move or a failover after the
// messages queued behind it would break the channel's order. A message
// refused with MOVED, ASK, TRYAGAIN, CLUSTERDOWN or LOADING (none of which
// runs it) is reported to done with an error wrapping
// shardcast.ErrNotSent, and the broker reads the slot map again; the
// caller may publish it again, knowing that it did not reach anyone.
// Like Publish, a call waits (bounded by ctx) while the partition's master
// is stalled and until the slot map names one.
//
// At most Options.MaxAsyncPublishes messages are in flight per broker; a
// call beyond it waits for room, bounded by ctx. done runs on the master
// connection's reader goroutine: it must not block, nor call Publish.
// Calls from one goroutine on one channel are sent in call order, and
// arrive in it except across a failover: messages still in flight on the
// demoted master (paused by the failover, then run as a replica and
// relayed) can be delivered after later ones the broker already sent to
// its successor, where Publish, which waits for each reply, keeps the
// order. The subscriber's order fence drops and reports such a late
// message only once it has itself moved to the successor. During
// an online re-layout a moving channel's message counts as in flight
// under its view until done, as Publish's does.
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
		v, path := b.view.Load(), router{b}.PathOf(channel)
		return a.send(ctx, path%bankSize, v.key(path, ""), channel, payload)
	}
	for {
		v := b.view.Load()
		p, keyPrefix, moving := v.publishRoute(channel)
		if moving {
			v.inflight.Add(1)
			if b.view.Load() != v {
				v.inflight.Add(-1)
				continue
			}
			a.view = v
		}
		return a.send(ctx, p, keyPrefix, channel, payload)
	}
}

// asyncCall is one message of PublishAsync in flight: what its outcome
// must update. Pooled, with its finish bound once, so that a steady
// stream of calls allocates nothing.
type asyncCall struct {
	b    *Broker
	view *view // counted in view.inflight until finished; nil if not
	done func(error)
	fn   func(error) // finish, bound when the call was made
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

// send queues the message on the connection to partition p's master; on a
// refusal it undoes what PublishAsync took and returns the error.
func (a *asyncCall) send(ctx context.Context, p int, keyPrefix, channel string, payload []byte) error {
	b := a.b
	pub, err := b.awaitRoute(ctx, p)
	if err == nil && pub == nil {
		b.core.Kick()
		err = errNoMaster
	}
	if err == nil {
		err = pub.SPublishAsync(ctx, keyPrefix, channel, payload, b.core.Options.Raw, time.Now(), a.fn)
	}
	if err == nil {
		return nil // a belongs to the connection until finish
	}
	a.release()
	if b.core.Closed() {
		return shardcast.ErrClosed
	}
	return fmt.Errorf("shardcast: publish: %w", err)
}

// finish is the outcome of the call's message, on the connection's reader.
func (a *asyncCall) finish(err error) {
	b, done := a.b, a.done
	a.release()
	switch {
	case err == nil:
		b.core.Published()
	case b.core.Closed():
		err = shardcast.ErrClosed
	default:
		// A redirection or a refusal for now did not run the message; any
		// failure may mean a stale route.
		b.core.Kick()
		if _, redirected := redirection(err); (redirected || refusedForNow(err)) && !errors.Is(err, pubconn.ErrNotSent) {
			err = fmt.Errorf("%w: %w", shardcast.ErrNotSent, err)
		}
		err = fmt.Errorf("shardcast: publish: %w", err)
	}
	if done != nil {
		done(err)
	}
}

// release gives back the call's room and view count, and the call.
func (a *asyncCall) release() {
	b, v := a.b, a.view
	*a = asyncCall{fn: a.fn}
	asyncCalls.Put(a)
	if v != nil {
		v.inflight.Add(-1)
	}
	b.async.Give()
}
