package sharded

import (
	"context"

	"github.com/shardcast/shardcast"
)

var _ shardcast.AsyncPublisher = (*Broker)(nil)

// PublishAsync sends payload to channel's shard with PUBLISH, like
// Publish, but returns once the message is queued: done hears the
// outcome (see shardcast.AsyncPublisher for the whole contract). Calls
// share writes with Publish on the shard's connection, so many messages
// in flight cost few syscalls and no parked goroutine each.
//
// At most Options.MaxAsyncPublishes messages are in flight per broker; a
// call beyond it waits for room, bounded by ctx. done runs on the
// shard connection's reader goroutine: it must not block, nor call
// Publish. Calls from one goroutine on one channel are sent in call
// order. An online re-layout waits for a moving channel's messages until
// done, as for Publish.
func (b *Broker) PublishAsync(ctx context.Context, channel string, payload []byte, done func(error)) error {
	return b.publisher.PublishAsync(ctx, channel, payload, done)
}
