package cluster

import (
	"context"

	"github.com/shardcast/shardcast"
)

var _ shardcast.AsyncPublisher = (*Broker)(nil)

// PublishAsync sends payload to channel's partition with SPUBLISH, like
// Publish, but returns once the message is queued on the connection to
// the partition's master: done hears the outcome (see
// shardcast.AsyncPublisher for the whole contract). At most
// Options.MaxAsyncPublishes messages are in flight; a call beyond it
// waits for room, bounded by ctx. done runs on the connection's reader
// goroutine: it must not block, nor call Publish.
//
// It does not follow redirections, which would reorder the channel: a
// message refused with MOVED, ASK, TRYAGAIN, CLUSTERDOWN or LOADING is
// reported to done with an error wrapping shardcast.ErrNotSent, and the
// broker reads the slot map again. A call waits, bounded by ctx, while
// the master is stalled, and fails at once, with ErrNotSent, while the
// slot map names no master for the partition. Calls from one goroutine
// on one channel arrive in call order, except across a failover, where
// messages still in flight on the demoted master can arrive after later
// ones; the subscriber's order fence drops and reports them. An online
// re-layout waits for a moving channel's messages until done, as for
// Publish.
func (b *Broker) PublishAsync(ctx context.Context, channel string, payload []byte, done func(error)) error {
	return b.publisher.PublishAsync(ctx, channel, payload, done)
}
