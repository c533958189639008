package centrifugebroker

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/centrifugal/centrifuge"
	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/cluster"
	"github.com/shardcast/shardcast/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestHistoryAfterRelayout: after an online re-layout of the cluster
// engine from 128 to 1024 partitions, publishes with history follow the
// channel to its new slot (the keys are built from the engine's layout in
// force, which Eval checks) and are delivered. The history kept under the
// old partition's tag is not moved: a channel whose key changed starts a
// new stream (a new epoch, offsets from 1), which Centrifuge's recovery
// reports as insufficient state (docs/RELAYOUT.md, known limits).
func TestHistoryAfterRelayout(t *testing.T) {
	c := redistest.StartCluster(t, 3, 0)
	a := shardcast.Agreement{App: "history-relayout:", Heartbeat: 50 * time.Millisecond}
	env := newHistoryEnv(t, Config{Cluster: &cluster.Config{Addrs: c.Seeds(), Agreement: a}}, func(*Broker, string) *redistest.Server { return nil })
	b := env.b
	l128, err := shardcast.NewLayout(128, "")
	require.NoError(t, err)
	l1024, err := shardcast.NewLayout(1024, "")
	require.NoError(t, err)
	ch := ""
	for i := 0; ch == ""; i++ {
		if x := fmt.Sprintf("moving-%d", i); l128.Key(x) != l1024.Key(x) {
			ch = x
		}
	}
	require.NoError(t, b.Subscribe(ch))
	first, err := b.Publish(ch, []byte("before"), withHistory(10, time.Minute))
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err = cluster.Relayout(ctx, cluster.RelayoutConfig{Addrs: c.Seeds(), Agreement: a, Partitions: 1024})
	require.NoError(t, err)

	after, err := b.Publish(ch, []byte("after"), withHistory(10, time.Minute))
	require.NoError(t, err, "a publish with history after the re-layout")
	waitFor(t, func() bool { return len(env.rec.get(ch)) == 2 }, func() string { return fmt.Sprintf("%d delivered", len(env.rec.get(ch))) })
	assert.Equal(t, uint64(1), after.Offset, "a new stream under the new tag")
	assert.NotEqual(t, first.Epoch, after.Epoch)
	pubs, _, err := b.History(ch, centrifuge.HistoryOptions{Filter: centrifuge.HistoryFilter{Limit: -1}})
	require.NoError(t, err)
	assert.Equal(t, []string{"1:after"}, datas(pubs))
}

// TestPresenceAfterRelayout: after an online re-layout of the cluster
// engine, presence calls follow a moving channel to its new slot and work
// there. Entries kept under the old partition's tag are not moved: the
// channel's presence starts over under the new one, filled again as nodes
// re-add their clients (every ClientPresenceUpdateInterval), while the old
// keys expire by their TTL.
func TestPresenceAfterRelayout(t *testing.T) {
	c := redistest.StartCluster(t, 3, 0)
	a := shardcast.Agreement{App: "presence-relayout:", Heartbeat: 50 * time.Millisecond}
	env := newHistoryEnv(t, Config{Cluster: &cluster.Config{Addrs: c.Seeds(), Agreement: a}}, func(*Broker, string) *redistest.Server { return nil })
	m := newPresence(t, env.b, PresenceConfig{UserMapping: mapped})
	l128, err := shardcast.NewLayout(128, "")
	require.NoError(t, err)
	l1024, err := shardcast.NewLayout(1024, "")
	require.NoError(t, err)
	ch := ""
	for i := 0; ch == ""; i++ {
		if x := fmt.Sprintf("%smoving-%d", mapPrefix, i); l128.Key(x) != l1024.Key(x) {
			ch = x
		}
	}
	require.NoError(t, m.AddPresence(ch, "before", clientInfo("before", "u1")))
	oldKeys := m.keys(ch)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err = cluster.Relayout(ctx, cluster.RelayoutConfig{Addrs: c.Seeds(), Agreement: a, Partitions: 1024})
	require.NoError(t, err)

	newKeys := m.keys(ch)
	require.NotEqual(t, oldKeys, newKeys, "the keys follow the layout in force")
	assert.Equal(t, centrifuge.PresenceStats{}, stats(t, m, ch), "a fresh start under the new tag")
	require.NoError(t, m.AddPresence(ch, "before", clientInfo("before", "u1")), "the node's next update")
	require.NoError(t, m.AddPresence(ch, "after", clientInfo("after", "u2")))
	assert.Equal(t, []string{"after", "before"}, presentClients(t, m, ch))
	assert.Equal(t, centrifuge.PresenceStats{NumClients: 2, NumUsers: 2}, stats(t, m, ch))
}
