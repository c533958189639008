package cluster

import (
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// countAndPublish increments a per-channel counter and publishes its new
// value to the channel, in one atomic step on the channel's master.
var countAndPublish = shardcast.NewScript(`
local n = redis.call('INCR', KEYS[1])
redis.call('SPUBLISH', ARGV[1], tostring(n))
return n`)

// counterKey is a channel's counter key, in the channel's slot.
func counterKey(b *Broker, channel string) string {
	l := b.Layout()
	return l.PartitionKey(l.Partition(channel), "count:"+channel)
}

// testEval: a script runs on the master of its channel's slot and its
// SPUBLISH reaches the channel's subscribers; a key outside that slot is
// refused before anything is sent.
func testEval(t *testing.T, c *redistest.Cluster) {
	ctx := testCtx(t, time.Minute)
	rec := newRecorder()
	sub := newBroker(t, Config{Addrs: c.Seeds(), Options: shardcast.Options{Raw: true, Handler: rec.handle}})
	pub := newBroker(t, Config{Addrs: c.Seeds(), Options: shardcast.Options{Raw: true}})
	channels := channelsPerPartition(pub.Layout(), 1, "eval.")[:24]
	require.NoError(t, sub.Subscribe(ctx, channels...))
	for _, ch := range channels {
		v, err := pub.Eval(ctx, ch, countAndPublish, []string{counterKey(pub, ch)}, pub.WireChannel(ch))
		require.NoError(t, err)
		assert.Equal(t, int64(1), v)
		owner, err := c.MasterOfSlot(ctx, pub.Layout().Slot(pub.Layout().Partition(ch)))
		require.NoError(t, err)
		n, err := owner.Do(ctx, "EXISTS", counterKey(pub, ch))
		require.NoError(t, err)
		assert.Equal(t, int64(1), n, "the counter of %s lives on its master", ch)
	}
	require.True(t, waitFor(20*time.Second, func() bool {
		for _, ch := range channels {
			if rec.count(ch) != 1 {
				return false
			}
		}
		return true
	}), "not every script's SPUBLISH was delivered")

	_, err := pub.Eval(ctx, channels[0], countAndPublish, []string{"elsewhere"}, "x")
	assert.ErrorIs(t, err, ErrInvalidKey)
	_, err = pub.Eval(ctx, channels[0], countAndPublish, nil)
	assert.ErrorIs(t, err, ErrInvalidKey)
}

// TestEvalFollowsSlotMove: once a channel's slot (and its keys) moved to
// another master, a broker that still routes it to the old one gets MOVED,
// resends through the cluster client, and the script runs on the new
// master against the migrated key.
func TestEvalFollowsSlotMove(t *testing.T) {
	c := redistest.StartCluster(t, 3, 0)
	ctx := testCtx(t, time.Minute)
	pub := newBroker(t, Config{Addrs: c.Seeds(), Options: shardcast.Options{Raw: true}})
	l := pub.Layout()
	ch := "moving"
	slot := l.Slot(l.Partition(ch))
	v, err := pub.Eval(ctx, ch, countAndPublish, []string{counterKey(pub, ch)}, pub.WireChannel(ch))
	require.NoError(t, err)
	require.Equal(t, int64(1), v)

	from, err := c.MasterOfSlot(ctx, slot)
	require.NoError(t, err)
	masters, err := c.Masters(ctx)
	require.NoError(t, err)
	to := masters[0]
	if to.Addr() == from.Addr() {
		to = masters[1]
	}
	require.NoError(t, c.MoveSlot(ctx, slot, to))
	v, err = pub.Eval(ctx, ch, countAndPublish, []string{counterKey(pub, ch)}, pub.WireChannel(ch))
	require.NoError(t, err, "the script follows its slot")
	assert.Equal(t, int64(2), v, "it ran against the migrated counter")
	n, err := to.Do(ctx, "GET", counterKey(pub, ch))
	require.NoError(t, err)
	assert.Equal(t, "2", n)
}
