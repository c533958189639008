package cluster

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/brokertest"
	"github.com/shardcast/shardcast/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestManyChannelsSurviveKill: a subscriber holding 100,000 channels (a
// million with SHARDCAST_HEAVY=1, see brokertest.HeavyEnv) over three
// masters has every subscribe connection killed. It reports them all
// interrupted, resubscribes them all, partition by partition, on the new
// connections (the masters hold every one again, a sample has one
// subscriber each and delivers), and its live heap does not double. The
// resubscribe time, the peak heap during it and the bytes it allocated
// are logged, not asserted. The cluster has no replicas: a master busy
// dropping a third of a million subscriptions can miss the 1 s node
// timeout, and a failover would move the channels this test counts.
func TestManyChannelsSurviveKill(t *testing.T) {
	c := redistest.StartCluster(t, 3, 0)
	n := brokertest.Channels()
	ctx := testCtx(t, 5*time.Minute)
	masters, err := c.Masters(ctx)
	require.NoError(t, err)
	var got atomic.Int64
	evs := &brokertest.EventCounts{}
	sub := newBroker(t, Config{Addrs: c.Seeds(), Options: shardcast.Options{
		Handler: func(shardcast.Message) { got.Add(1) }, OnEvent: evs.Add}})
	chans := numbered("many.", n)
	began := time.Now()
	require.NoError(t, sub.Subscribe(ctx, chans...))
	subscribed := time.Since(began)
	require.Equal(t, n, shardChannels(t, masters))

	heap := brokertest.WatchHeap()
	killed := time.Now()
	for _, m := range masters {
		_, err := m.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub")
		require.NoError(t, err)
	}
	require.True(t, waitFor(5*time.Minute, func() bool { return evs.Of(shardcast.EventRestored).Channels >= n }),
		"restored %d of %d channels", evs.Of(shardcast.EventRestored).Channels, n)
	resubscribed := time.Since(killed)
	mem := heap.Stop()
	assert.Equal(t, brokertest.KindCount{Events: len(masters), Channels: n}, evs.Of(shardcast.EventInterrupted),
		"every channel interrupted, one event per master")
	assert.Equal(t, n, evs.Of(shardcast.EventRestored).Channels, "every channel restored once")
	assert.Equal(t, n, shardChannels(t, masters), "the masters hold every channel again")
	sample := brokertest.Sample(chans, 1000)
	l := sub.Layout()
	for _, ch := range sample[:50] {
		owner, err := c.MasterOfSlot(ctx, l.Slot(l.Partition(ch)))
		require.NoError(t, err)
		reply, err := owner.Do(ctx, "PUBSUB", "SHARDNUMSUB", l.Key(ch))
		require.NoError(t, err)
		require.Equal(t, []any{l.Key(ch), int64(1)}, reply)
	}
	publishAll(t, sub, sample, "1")
	require.True(t, waitFor(20*time.Second, func() bool { return got.Load() == int64(len(sample)) }),
		"%d of the sample's %d messages delivered", got.Load(), len(sample))
	var commands uint64
	for _, st := range sub.NodeStats() {
		commands += st.ResubscribeCommands
	}
	t.Logf("%d channels on %d masters: subscribed in %v; after CLIENT KILL resubscribed in %v (%d SSUBSCRIBE commands); %v",
		n, len(masters), subscribed.Round(time.Millisecond), resubscribed.Round(time.Millisecond), commands, mem)
	assert.Less(t, mem.LiveAfter, 2*mem.LiveBefore, "live heap after the resubscribe")
	runtime.KeepAlive(chans)
}

// shardChannels returns how many shard channels the masters' clients
// hold, in all (CLIENT LIST ssub=; Redis 7.0's INFO has no count).
func shardChannels(t *testing.T, masters []*redistest.Server) int {
	t.Helper()
	total := 0
	for _, m := range masters {
		counts, err := ssubClients(t.Context(), m)
		require.NoError(t, err)
		for _, n := range counts {
			total += n
		}
	}
	return total
}
