// Package sharded is the shardcast engine for isolated Redis (or Valkey)
// instances: a channel lives on instance jump(xxhash64(channel), N) and
// uses classic PUBLISH / SUBSCRIBE there.
//
// Publishes go out on one pipelined connection per instance, and
// concurrent ones share writes without a flush delay. Subscriptions ride on a small fixed
// number of dedicated connections per instance (default one), sent in
// commands of at most Options.SubscribeBatch channels. When a connection
// drops, the broker reconnects with backoff, resubscribes every channel it
// holds in batches, and raises EventInterrupted and EventRestored naming
// the channels and the gap.
//
// Every call honours its ctx, also against an instance that stopped
// answering: work that must still reach Redis for the broker's state to
// hold (undoing a cut-short Subscribe, finishing an Unsubscribe) goes on in
// the background, ahead of later calls on the same connection. The one
// exception is a Publish that is writing other callers' commands: it may
// finish that write up to Conn.WriteTimeout after its ctx ends. A
// subscribe connection whose pings go unanswered for Conn.HealthTimeout is
// dropped and reconnected like a closed one; the publishing connection is
// dropped when a write blocks for Conn.WriteTimeout or its oldest publish
// goes unanswered for Conn.ReplyTimeout.
//
// The order of Config.Addrs is a wire contract: every node must list the
// same instances in the same order. New checks it against the layout
// record on the control instance (Config.ControlAddr, default Addrs[0]) and
// refuses a list that differs from the running brokers' (see
// shardcast.Agreement).
//
// A shard may be a master that Redis Sentinel monitors
// (redis+sentinel://host:26379,…/name in Config.Addrs): the broker asks
// the Sentinels for it, follows its failovers, and names the shard by its
// master name in the layout, so a failover changes nothing there.
// Config.SubscribeOn Replicas moves such a shard's subscriptions onto its
// replicas, spreading the fan-out (docs/OPERATING.md).
package sharded
