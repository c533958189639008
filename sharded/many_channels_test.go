package sharded

import (
	"context"
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

// TestManyChannelsSurviveKill: a subscriber holding 100,000 channels on
// one instance (a million with SHARDCAST_HEAVY=1, see
// brokertest.HeavyEnv) has its subscribe connection killed. It
// reports them all interrupted, resubscribes them all in batches of 512
// on the new connection (Redis holds every one again, a sample has one
// subscriber each and delivers), and its live heap does not double. The
// resubscribe time, the peak heap during it and the bytes it allocated
// are logged, not asserted.
func TestManyChannelsSurviveKill(t *testing.T) {
	n := brokertest.Channels()
	s := redistest.StartStandalone(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var got atomic.Int64
	evs := &brokertest.EventCounts{}
	sub := newBroker(t, Config{Addrs: addrs(s), Options: shardcast.Options{
		Handler: func(shardcast.Message) { got.Add(1) }, OnEvent: evs.Add}})
	pub := newBroker(t, Config{Addrs: addrs(s)})
	chans := channelNames("many:", n)
	began := time.Now()
	require.NoError(t, sub.Subscribe(ctx, chans...))
	subscribed := time.Since(began)
	require.Equal(t, n, pubsubChannels(t, s))

	heap := brokertest.WatchHeap()
	killed := time.Now()
	_, err := s.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return evs.Of(shardcast.EventRestored).Events > 0 }, 5*time.Minute, 5*time.Millisecond,
		"the restore")
	resubscribed := time.Since(killed)
	mem := heap.Stop()
	assert.Equal(t, brokertest.KindCount{Events: 1, Channels: n}, evs.Of(shardcast.EventInterrupted), "every channel interrupted")
	assert.Equal(t, brokertest.KindCount{Events: 1, Channels: n}, evs.Of(shardcast.EventRestored), "every channel restored")
	assert.Equal(t, n, pubsubChannels(t, s), "Redis holds every channel again")
	sample := brokertest.Sample(chans, 1000)
	reply, err := s.Do(ctx, append([]string{"PUBSUB", "NUMSUB"}, sample...)...)
	require.NoError(t, err)
	counts := reply.([]any)
	for i, ch := range sample {
		require.Equal(t, []any{ch, int64(1)}, counts[2*i:2*i+2])
	}
	publishAll(t, pub, sample, payloadOf)
	waitFor(t, "the sample's deliveries", func() bool { return got.Load() == int64(len(sample)) })
	st := sub.NodeStats()[0]
	t.Logf("%d channels: subscribed in %v; after CLIENT KILL resubscribed in %v (%d SUBSCRIBE commands); %v",
		n, subscribed.Round(time.Millisecond), resubscribed.Round(time.Millisecond), st.ResubscribeCommands, mem)
	assert.Less(t, mem.LiveAfter, 2*mem.LiveBefore, "live heap after the resubscribe")
	runtime.KeepAlive(chans)
}
