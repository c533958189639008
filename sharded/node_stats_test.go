package sharded

import (
	"context"
	"testing"

	"github.com/shardcast/shardcast"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestNodeStats: each instance's counters move with its own traffic, and
// a kill and restart move only the victim's reconnects, resubscribe
// commands and down time.
func TestNodeStats(t *testing.T) {
	servers := startServers(t, 2)
	rec := newRecorder()
	var evs events
	sub := newBroker(t, Config{Addrs: addrs(servers...), Options: shardcast.Options{Handler: rec.handle, OnEvent: evs.Add}})
	pub := newBroker(t, Config{Addrs: addrs(servers...)})
	ctx := context.Background()
	chans := channelNames("nodestats:", 40)
	require.NoError(t, sub.Subscribe(ctx, chans...))
	perShard := make([]uint64, 2)
	for _, ch := range chans {
		require.NoError(t, pub.Publish(ctx, ch, []byte("x")))
		perShard[pub.Shard(ch)]++
	}
	waitFor(t, "every message", func() bool { return len(rec.missing(chans, 1)) == 0 })
	pubStats, subStats := pub.NodeStats(), sub.NodeStats()
	for i, s := range servers {
		assert.Equal(t, s.Addr(), pubStats[i].Addr)
		assert.Equal(t, perShard[i], pubStats[i].Published, "published to instance %d", i)
		assert.Equal(t, perShard[i], subStats[i].Received, "received from instance %d", i)
		assert.Zero(t, subStats[i].Reconnects+subStats[i].ResubscribeCommands)
		assert.Zero(t, subStats[i].Down)
	}

	victim := servers[1]
	require.NoError(t, victim.Kill())
	waitFor(t, "EventInterrupted", func() bool { return len(evs.Of(shardcast.EventInterrupted)) > 0 })
	require.NoError(t, victim.Restart(ctx))
	waitFor(t, "EventRestored", func() bool { return len(evs.Of(shardcast.EventRestored)) > 0 })
	after := sub.NodeStats()
	assert.EqualValues(t, 1, after[1].Reconnects)
	assert.Positive(t, after[1].ResubscribeCommands)
	assert.Positive(t, after[1].Down, "the outage counts as down time")
	assert.Zero(t, after[0].Reconnects+after[0].ResubscribeCommands, "the other instance is untouched")
	assert.Zero(t, after[0].Down)
}
