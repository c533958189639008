// Package layoutkey names the keys and the barrier channel of one
// application's layout record (shardcast.Agreement.App). The agreement
// writes them, the re-layout and the engines' tests read them, and the
// engine kit tells a barrier from an application's channel by its name;
// none of them is for users, so the root package keeps only RecordKey.
package layoutkey

import "github.com/shardcast/shardcast"

// The keys of one application's layout record and its barrier channel all
// begin with its Agreement.App and then keyBase (see
// shardcast.Agreement.RecordKey), which Redis Cluster hashes to one slot,
// so that one script can change them together. Names under it are
// reserved for the agreement; docs/LAYOUT.md §9 lists them.
var keyBase = recordBase(shardcast.Agreement{})

// recordBase is what a's record key holds between App and "record".
func recordBase(a shardcast.Agreement) string {
	k := a.RecordKey()
	return k[len(a.App) : len(k)-len("record")]
}

// Registry names the sorted set of live brokers, each scored by the
// Redis server time, in milliseconds, at which its registration expires.
func Registry(a shardcast.Agreement) string { return a.App + keyBase + "brokers" }

// Transition names the hash that holds the online re-layout under way,
// if any (docs/RELAYOUT.md).
func Transition(a shardcast.Agreement) string { return a.App + keyBase + "transition" }

// Instance names the string the sharded engine keeps in each of its
// instances: a random id the first broker to reach the instance writes
// (if absent, so once) and every broker reads back. It names the instance
// in the layout record (shardcast.LayoutRecord.InstanceIDs) whatever address a
// broker reaches it by. It has no TTL; it goes with the instance's data
// (a restart without persistence, FLUSHALL), and the next broker then
// writes a new one.
func Instance(a shardcast.Agreement) string { return a.App + keyBase + "instance" }

// Placement names the counter each broker that may subscribe on
// replicas increments once, at start, to number itself: brokers numbered
// in turn spread evenly over each shard's nodes (cluster.SubscribeOn).
func Placement(a shardcast.Agreement) string { return a.App + keyBase + "placement" }

// Acks names the hash in which each live broker acknowledges the phase
// of the re-layout it completed.
func Acks(a shardcast.Agreement) string { return a.App + keyBase + "acks" }

// Barrier names the channel on which the coordinator of re-layout
// id sends its barriers.
func Barrier(a shardcast.Agreement, id string) string {
	return a.App + keyBase + "barrier:" + id
}
