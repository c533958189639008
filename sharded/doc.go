// Package sharded is the shardcast engine for isolated Redis (or Valkey)
// instances: a channel lives on instance jump(xxhash64(channel), N) and
// uses classic PUBLISH / SUBSCRIBE there.
//
// Publishes are pipelined by rueidis. Subscriptions ride on a small fixed
// number of dedicated connections per instance (default one), sent in
// commands of at most Options.SubscribeBatch channels. When a connection
// drops, the broker reconnects with backoff, resubscribes every channel it
// holds in batches, and raises EventInterrupted and EventRestored naming
// the channels and the gap.
//
// The order of Config.Addrs is a wire contract: every node must list the
// same instances in the same order (compare Broker.Fingerprint).
package sharded
