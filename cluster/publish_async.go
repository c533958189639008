package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/engine"
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
// is stalled; unlike it, a call for a partition whose slot the map names no
// master for fails at once with an error wrapping shardcast.ErrNotSent.
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
	a, err := b.async.Start(ctx, channel, payload, done)
	if err != nil {
		return err
	}
	if strings.HasPrefix(channel, engine.ProbeChannelPrefix) {
		v, path := b.view.Load(), router{b}.PathOf(channel)
		return b.sendAsync(ctx, a, path%bankSize, v.key(path, ""), channel, payload)
	}
	for {
		v := b.view.Load()
		p, keyPrefix, moving := v.publishRoute(channel)
		if moving {
			if !engine.Pin(&b.view, v, &v.inflight) {
				continue
			}
			a.Count(&v.inflight)
		}
		return b.sendAsync(ctx, a, p, keyPrefix, channel, payload)
	}
}

// sendAsync queues call a's message on the connection to partition p's
// master; on a refusal it abandons the call and returns the error.
func (b *Broker) sendAsync(ctx context.Context, a *engine.AsyncCall, p int, keyPrefix, channel string, payload []byte) error {
	pub, err := b.awaitRoute(ctx, p)
	if err == nil && pub == nil {
		b.core.Kick()
		err = errNoMaster
	}
	if err == nil {
		err = pub.SPublishAsync(ctx, keyPrefix, channel, payload, b.core.Options.Raw, time.Now(), a.Finish())
	}
	if err == nil {
		return nil // a belongs to the connection until it finishes
	}
	a.Abandon()
	if b.core.Closed() {
		return shardcast.ErrClosed
	}
	return fmt.Errorf("shardcast: publish: %w", err)
}

// asyncFailed is the error done hears for a PublishAsync message that
// failed.
func (b *Broker) asyncFailed(_ string, err error) error {
	if b.core.Closed() {
		return shardcast.ErrClosed
	}
	// A redirection or a refusal for now did not run the message; any
	// failure may mean a stale route.
	b.core.Kick()
	if (engine.IsMoved(err) || refusedForNow(err)) && !errors.Is(err, pubconn.ErrNotSent) {
		err = fmt.Errorf("%w: %w", shardcast.ErrNotSent, err)
	}
	return fmt.Errorf("shardcast: publish: %w", err)
}
