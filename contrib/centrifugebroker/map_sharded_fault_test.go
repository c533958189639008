package centrifugebroker

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/centrifugal/centrifuge"
	"github.com/shardcast/shardcast/redistest"
	"github.com/shardcast/shardcast/sharded"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// startShardedMapFault starts two standalone instances, a publishing node
// and a subscribing node on them, and returns the instance of a map
// channel and the channel.
func startShardedMapFault(t *testing.T, name string) (pubMB, subMB *MapBroker, subNode *centrifuge.Node, ch string, victim *redistest.Server) {
	servers := []*redistest.Server{redistest.StartStandalone(t), redistest.StartStandalone(t)}
	cfg := Config{Sharded: &sharded.Config{Addrs: []string{servers[0].Addr(), servers[1].Addr()}}, CallTimeout: 5 * time.Second}
	_, pubMB, _ = startMapClientNode(t, cfg)
	subNode, subMB, _ = startMapClientNode(t, cfg)
	ch = bigMap + name + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	return pubMB, subMB, subNode, ch, servers[pubMB.b.engine.(*sharded.Broker).Shard(pubMB.wire(ch))]
}

// TestMapShardedPaused freezes (SIGSTOP) the instance of a map channel
// while a node keeps publishing to it and a client of another node is
// subscribed, until the broker's health ping gives up on it and the client
// is told to resubscribe; then thaws it. It proves that nothing the
// publisher was told succeeded is lost or doubled (publishes cut short
// while frozen and retried under their idempotency key run once: the
// stream holds each once, in order, at contiguous offsets, under the
// epoch it had), and that the client, without a final publication, ends
// holding the map Redis holds, with no gap in what came live.
func TestMapShardedPaused(t *testing.T) {
	pubMB, subMB, subNode, ch, victim := startShardedMapFault(t, "paused")
	feed := startMapFeed(t, pubMB, ch)
	feed.waitRounds(t, 3)
	client := newMapClient(t, subNode, ch)
	feed.waitRounds(t, 20)

	require.NoError(t, victim.Pause())
	waitFor(t, func() bool { return client.reportCopy().Resyncs > 0 },
		func() string { return "the broker to give up on the frozen instance and tell the client" })
	require.NoError(t, victim.Resume())
	feed.waitRounds(t, 50)
	require.NoError(t, feed.halt())

	updates := feed.updates(ch)
	checkStream(t, pubMB, ch, updates, 1, updates[0].pos.Epoch)
	waitInStep(t, client, pubMB)
	rep := client.reportCopy()
	assert.Positive(t, subMB.b.resync.unsubscribed.Load(), "the broker told the client")
	assert.Empty(t, rep.Gaps)
	assert.Empty(t, rep.Failures)
	t.Logf("%d publications; client report %+v", len(updates), rep)
}

// TestMapShardedRestarted kills the instance of a map channel a client is
// subscribed to and restarts it without persistence: the channel's meta is
// gone, so its epoch changes. It proves the client is told to resubscribe,
// its recovery from the old epoch is refused as unrecoverable, and it
// starts over from the new epoch's (empty) state, then follows what comes
// next live.
func TestMapShardedRestarted(t *testing.T) {
	pubMB, subMB, subNode, ch, victim := startShardedMapFault(t, "restarted")
	for i := range 5 {
		publish(t, pubMB, ch, "k"+strconv.Itoa(i), "v", centrifuge.MapPublishOptions{})
	}
	client := newMapClient(t, subNode, ch)
	waitInStep(t, client, pubMB)
	_, before, _, _ := client.view()

	require.NoError(t, victim.Kill())
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()
	require.NoError(t, victim.Restart(ctx))
	waitFor(t, func() bool {
		_, _, live, rep := client.view()
		return live && rep.Unrecoverable > 0
	}, func() string { return "the client to be refused its recovery and start over" })
	got, pos, _, _ := client.view()
	assert.Empty(t, got, "the restart lost the map")
	assert.NotEqual(t, before.Epoch, pos.Epoch, "a new epoch")

	publish(t, pubMB, ch, "after", "a", centrifuge.MapPublishOptions{})
	waitInStep(t, client, pubMB)
	got, _, _, rep := client.view()
	assert.Equal(t, map[string]string{"after": "a"}, got)
	assert.Positive(t, subMB.b.resync.unsubscribed.Load(), "the broker told the client")
	assert.Empty(t, rep.Gaps)
	assert.Empty(t, rep.Failures)
	t.Logf("client report %+v", rep)
}
