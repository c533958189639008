package sharded

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/engine"
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
	a, err := b.async.Start(ctx, channel, payload, done)
	if err != nil {
		return err
	}
	if strings.HasPrefix(channel, engine.ProbeChannelPrefix) {
		return b.sendAsync(ctx, a, b.probeSlot(channel), channel, payload)
	}
	for {
		r := b.route.Load()
		i, moving := r.publishSlot(channel)
		if moving {
			if !engine.Pin(&b.route, r, &r.inflight) {
				continue
			}
			a.Count(&r.inflight)
		}
		return b.sendAsync(ctx, a, i, channel, payload)
	}
}

// sendAsync queues call a's message on slot i's connection; on a refusal
// it abandons the call and returns the error as Publish would.
func (b *Broker) sendAsync(ctx context.Context, a *engine.AsyncCall, i int, channel string, payload []byte) error {
	sh := b.slots[i].Load()
	var err error
	if sh == nil {
		err = fmt.Errorf("shardcast: publish %q: no instance in slot %d", channel, i)
	} else {
		a.SetWhere(sh.addr)
		err = sh.pub.PublishAsync(ctx, channel, payload, b.core.Options.Raw, time.Now(), a.Finish())
		if err != nil {
			err = b.publishErr(sh.addr, err)
		}
	}
	if err == nil {
		return nil // a belongs to the connection until it finishes
	}
	a.Abandon()
	return err
}

// publishErr is the error Publish returns for a failed publish to addr.
func (b *Broker) publishErr(addr string, err error) error {
	if b.core.Closed() {
		return shardcast.ErrClosed // Close cut the call short
	}
	return fmt.Errorf("shardcast: publish to shard %s: %w", addr, err)
}
