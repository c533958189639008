package cluster

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/shardcast/shardcast/redistest"
	"github.com/stretchr/testify/require"
)

// Counters of Pub/Sub messages a node received over the cluster bus:
// classic PUBLISH (broadcast to every node) and SPUBLISH (sent to the
// slot's master's replicas). Redis 7.0-7.4 and Valkey 8.0 count both on the
// receiving side; Valkey 8.0 does not count its SPUBLISH sends in
// ..._publishshard_sent (docs/SERVERS.md), so the sender's side cannot be
// the measure.
const (
	busPublishReceived      = "cluster_stats_messages_publish_received"
	busPublishShardReceived = "cluster_stats_messages_publishshard_received"
)

// busCounters reads counter from every node's CLUSTER INFO (absent
// counts as 0: a node that never received such a message does not list
// it).
func busCounters(ctx context.Context, t *testing.T, nodes []*redistest.Server, counters ...string) map[*redistest.Server]int64 {
	t.Helper()
	out := make(map[*redistest.Server]int64, len(nodes))
	for _, n := range nodes {
		info, err := clusterInfo(ctx, n)
		require.NoError(t, err, "CLUSTER INFO on %s", n.Addr())
		for _, c := range counters {
			v, _ := strconv.ParseInt(info[c], 10, 64)
			out[n] += v
		}
	}
	return out
}

// busSpread is where the Pub/Sub messages of one burst of n publishes went
// on the cluster bus: how many each node received.
type busSpread struct {
	received map[*redistest.Server]int64
}

// measureBusSpread runs publish, which sends n messages of one channel,
// and waits until every node of want (the channel's master's replicas,
// where sharded Pub/Sub must send them, or every other node for a
// broadcast) received n more Pub/Sub bus messages than before, failing t
// after 10 s. It returns what every node received meanwhile. The bus is
// asynchronous, but a node sends a message to all its targets in the same
// pass, so once the replicas have every message a broadcast would have
// reached the other nodes too.
func measureBusSpread(ctx context.Context, t *testing.T, nodes, want []*redistest.Server, n int64, publish func()) busSpread {
	t.Helper()
	before := busCounters(ctx, t, nodes, busPublishReceived, busPublishShardReceived)
	publish()
	var now map[*redistest.Server]int64
	ok := waitFor(10*time.Second, func() bool {
		now = busCounters(ctx, t, nodes, busPublishReceived, busPublishShardReceived)
		for _, r := range want {
			if now[r]-before[r] < n {
				return false
			}
		}
		return true
	})
	spread := busSpread{received: make(map[*redistest.Server]int64, len(nodes))}
	for _, node := range nodes {
		spread.received[node] = now[node] - before[node]
	}
	require.True(t, ok, "the shard's replicas did not receive %d bus messages within 10 s: %s", n, spread.describe(nodes))
	return spread
}

// outside returns the nodes besides shard (the owning master and its
// replicas) that received any Pub/Sub bus message, with their counts.
func (b busSpread) outside(shard []*redistest.Server) map[string]int64 {
	in := make(map[*redistest.Server]bool, len(shard))
	for _, s := range shard {
		in[s] = true
	}
	out := make(map[string]int64)
	for node, d := range b.received {
		if !in[node] && d != 0 {
			out[node.Addr()] = d
		}
	}
	return out
}

func (b busSpread) describe(nodes []*redistest.Server) string {
	s := ""
	for _, n := range nodes {
		s += fmt.Sprintf(" %s:+%d", n.Addr(), b.received[n])
	}
	return s
}
