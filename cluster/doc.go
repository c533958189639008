// Package cluster is the shardcast engine for Redis Cluster: sharded
// Pub/Sub (SPUBLISH / SSUBSCRIBE) with channels grouped into partitions
// and subscriptions grouped by master.
//
// A channel belongs to partition jump(xxhash64(channel), Partitions) and
// travels on the wire as "{tag}." + Prefix + channel, where the tag is the
// partition's entry in a shipped, balanced tag table. Each broker holds one
// subscribe connection per master, whatever the partition count, and sends
// one SSUBSCRIBE per partition (per at most SubscribeBatch channels).
//
// The broker follows the topology from three signals: a periodic CLUSTER
// SLOTS poll, server-pushed sunsubscribe notices (a slot moved), and
// connection errors or unanswered pings (a failed or frozen master). On a
// change it moves the affected partitions to their new master and reports
// EventTopologyChanged, EventInterrupted and EventRestored.
//
// Publishes go out on one pipelined connection per master, routed by the
// broker's slot map; concurrent ones share writes without a flush delay. A
// publish the master redirects (MOVED, ASK) is resent to the node named,
// and one that cannot reach its master is resent, after a backoff, to the
// master the slot map names by then; either prompts a slot-map poll. The
// same connection carries the slot-map polls and the masters' ROLE checks,
// so a broker holds two connections per master: one to publish, one to
// subscribe (none on a publish-only broker).
//
// A master whose publishing connection leaves a command unanswered for
// HealthInterval may be frozen, and may be failed over while it sleeps; on
// waking it would accept, as a replica of its successor, SPUBLISHes it
// relays late or not at all. Its publishes are therefore held until it
// answers again and the slot map, read from another master, still names
// it, or until the map names its successor and the route moves there
// (bounded by HealthTimeout): a publish then waits rather than being
// acknowledged and lost.
package cluster
