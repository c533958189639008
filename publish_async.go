package shardcast

import "context"

// AsyncPublisher is implemented by brokers that can publish without
// waiting for Redis's reply: a real-time server that fans out many
// messages keeps them in flight together instead of parking a goroutine
// on each round trip. Find it with a type assertion:
//
//	if ap, ok := broker.(shardcast.AsyncPublisher); ok { … }
//
// Both engines implement it. Publish stays the default and is unchanged.
// On a Redis Cluster, PublishAsync does not follow redirections itself (a
// message a slot move or a failover refused is reported to done as not
// sent, see cluster.Broker.PublishAsync), where Publish resends it.
type AsyncPublisher interface {
	// PublishAsync checks its arguments as Publish does, queues the
	// message and returns without waiting for Redis. payload is encoded
	// before it returns, so the caller may reuse it at once.
	//
	// A non-nil error means the message was not queued, and done is
	// never called: a bad argument or a closed broker (the errors of
	// Publish), ctx ending while the call waited for room or for a
	// connection, or an error wrapping ErrNotSent. Otherwise done (which
	// may be nil) is called exactly once with what Publish would have
	// returned: nil once Redis accepted the message (counted then in
	// Stats.Published), or the failure, wrapping ErrNotSent when Redis
	// certainly did not get it. Close calls the done of every message
	// still in flight before it returns.
	//
	// done runs on the broker's connection reader, and every reply behind
	// it waits for it: it must not block, and must not call Publish or
	// wait for a room in PublishAsync.
	//
	// At most Options.MaxAsyncPublishes messages are in flight per
	// broker; a call beyond that waits for room, bounded by ctx (which
	// bounds only this wait and a dial: once queued, a message is no
	// longer tied to ctx). Messages published one after another from one
	// goroutine on one channel are sent in call order, whatever mix of
	// Publish and PublishAsync; one that fails does not hold back the
	// next, so delivery stays at-most-once and per-channel ordered (on a
	// Redis Cluster, except across a failover: see
	// cluster.Broker.PublishAsync).
	PublishAsync(ctx context.Context, channel string, payload []byte, done func(error)) error
}
