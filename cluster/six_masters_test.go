package cluster

import (
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSixMasters runs the balance and resubscribe-cost checks on one
// 6-master cluster without replicas.
func TestSixMasters(t *testing.T) {
	c := redistest.StartCluster(t, 6, 0)
	t.Run("PublishBalance", func(t *testing.T) { testPublishBalance(t, c) })
	t.Run("ResubscribeOneCommandPerPartition", func(t *testing.T) { testResubscribeCost(t, c) })
}

func testPublishBalance(t *testing.T, c *redistest.Cluster) {
	ctx := testCtx(t, time.Minute)
	masters, err := c.Masters(ctx)
	require.NoError(t, err)
	require.Len(t, masters, 6)
	pub := newBroker(t, Config{Addrs: c.Seeds()})
	channels := numbered("balance.", 10000)

	before := make([]int64, len(masters))
	for i, m := range masters {
		before[i] = commandCalls(t, m, "spublish")
	}
	const rounds = 3
	for r := range rounds {
		publishAll(t, pub, channels, strconv.Itoa(r))
	}
	counts := make([]float64, len(masters))
	var sum float64
	for i, m := range masters {
		counts[i] = float64(commandCalls(t, m, "spublish") - before[i])
		sum += counts[i]
	}
	require.Equal(t, float64(rounds*len(channels)), sum, "every publish ran exactly once on some master")
	mean := sum / float64(len(masters))
	for i, m := range masters {
		dev := (counts[i] - mean) / mean
		t.Logf("master %s: %.0f SPUBLISH (%+.1f%% of the mean %.0f)", m.Addr(), counts[i], 100*dev, mean)
		assert.LessOrEqual(t, math.Abs(dev), 0.15, "master %s is off balance", m.Addr())
	}
}

func testResubscribeCost(t *testing.T, c *redistest.Cluster) {
	ctx := testCtx(t, 2*time.Minute)
	var events eventLog
	rec := newRecorder()
	sub := newBroker(t, Config{Addrs: c.Seeds(), TopologyInterval: time.Second,
		Options: shardcast.Options{Handler: rec.handle, OnEvent: events.Add}})
	pub := newBroker(t, Config{Addrs: c.Seeds()})
	l := sub.Layout()
	channels := channelsPerPartition(l, 100, "resub.")
	require.NoError(t, sub.Subscribe(ctx, channels...))

	masters, err := c.Masters(ctx)
	require.NoError(t, err)
	victim := masters[2]
	owned := sub.Masters()[victim.Addr()]
	require.NotEmpty(t, owned)
	t.Logf("master %s owns %d partitions (%d channels)", victim.Addr(), len(owned), 100*len(owned))

	before := commandCalls(t, victim, "ssubscribe")
	killedAt := time.Now()
	_, err = victim.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub")
	require.NoError(t, err)

	// Restored must name exactly the victim's partitions.
	require.True(t, waitFor(30*time.Second, func() bool {
		parts, _ := eventPartitions(&events, shardcast.EventRestored)
		return len(parts) == len(owned)
	}), "partitions restored: %v", events.All())
	interrupted, shards := eventPartitions(&events, shardcast.EventInterrupted)
	assert.Equal(t, setOf(owned), interrupted)
	assert.Equal(t, map[string]bool{victim.Addr(): true}, shards)
	restored, shards := eventPartitions(&events, shardcast.EventRestored)
	assert.Equal(t, setOf(owned), restored)
	assert.Equal(t, map[string]bool{victim.Addr(): true}, shards)

	// Every channel delivers again, on every master.
	mark := time.Now()
	publishAll(t, pub, channels, "1")
	rec.waitSilentSince(t, channels, mark, 30*time.Second)
	t.Logf("all %d channels deliver again, %v after the kill", len(channels), time.Since(killedAt).Round(time.Millisecond))

	got := commandCalls(t, victim, "ssubscribe") - before
	t.Logf("SSUBSCRIBE calls on %s after CLIENT KILL: %d for %d partitions", victim.Addr(), got, len(owned))
	assert.Equal(t, int64(len(owned)), got, "one SSUBSCRIBE per partition")
	assert.Equal(t, uint64(1), sub.Stats().Reconnects)
}

func setOf(s []int) map[int]bool {
	out := make(map[int]bool, len(s))
	for _, v := range s {
		out[v] = true
	}
	return out
}
