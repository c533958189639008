package centrifugebroker

import (
	"sync/atomic"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/cluster"
)

// keyspace names the Redis keys the adapter keeps beside a channel
// (history, idempotent results, presence), so that a script the engine's
// Eval runs on the channel's node finds them there: on the sharded engine
// the channel's instance holds any key, and the names are
// Config.KeyPrefix + name; on the cluster engine they also start with the
// channel's partition place, "{tag}." and the engine's prefix, as
// Layout.PartitionKey writes them, which puts them in the channel's slot.
type keyspace struct {
	// cluster is the cluster engine; nil for the sharded engine. Its
	// layout is read on every call, so that the keys follow an online
	// re-layout (the engine's Eval checks them against where the
	// channel's publishes go); places caches, per layout, the place of
	// each partition.
	cluster *cluster.Broker
	places  atomic.Pointer[partitionPlaces]
	// prefix is Config.KeyPrefix.
	prefix string
}

// newKeyspace returns the keyspace of engine's channels, named after
// prefix.
func newKeyspace(engine shardcast.Broker, prefix string) *keyspace {
	k := &keyspace{prefix: prefix}
	k.cluster, _ = engine.(*cluster.Broker)
	return k
}

// partitionPlaces is, for one cluster layout, the "{tag}." + prefix of
// each partition.
type partitionPlaces struct {
	layout *shardcast.Layout
	prefix []string
}

// place returns what starts the keys of ch: "{tag}." + prefix of its
// partition under the layout the cluster engine publishes by, or "" for
// the sharded engine.
func (k *keyspace) place(ch string) string {
	if k.cluster == nil {
		return ""
	}
	l := k.cluster.Layout()
	pp := k.places.Load()
	if pp == nil || pp.layout != l {
		pp = &partitionPlaces{layout: l, prefix: make([]string, l.Partitions())}
		for p := range pp.prefix {
			pp.prefix[p] = l.PartitionKey(p, "")
		}
		k.places.Store(pp)
	}
	return pp.prefix[l.Partition(ch)]
}

// addKey adds to a the Redis key made of name on the node of a channel
// whose keys start with place (see place).
func (k *keyspace) addKey(a *scriptArgs, place string, name ...string) {
	a.buf = append(a.buf, place...)
	a.buf = append(a.buf, k.prefix...)
	a.add(name...)
}
