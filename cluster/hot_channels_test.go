package cluster

import (
	"slices"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/brokertest"
	"github.com/shardcast/shardcast/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testHotChannels: a channel with 80% of a broker's traffic is reported,
// in and out, against the master of its partition, and raises an
// EventHotChannel naming that master.
func testHotChannels(t *testing.T, c *redistest.Cluster) {
	ctx := testCtx(t, time.Minute)
	var evs brokertest.EventLog
	b := newBroker(t, Config{Addrs: c.Seeds(), Options: shardcast.Options{
		Handler: func(shardcast.Message) {}, OnEvent: evs.Add,
		HotSampleRate: 0.5, HotWindow: 100 * time.Millisecond,
	}})
	// The cold channels share the hot one's partition, so that its master
	// sees both.
	p := b.Layout().Partition("hot")
	var cold []string
	for i := 0; len(cold) < 5; i++ {
		if ch := "cold:" + string(rune('a'+i%26)) + string(rune('a'+i/26%26)); b.Layout().Partition(ch) == p {
			cold = append(cold, ch)
		}
	}
	require.NoError(t, b.Subscribe(ctx, append(cold, "hot")...))
	var master string
	for addr, parts := range b.Masters() {
		if slices.Contains(parts, p) {
			master = addr
		}
	}
	require.NotEmpty(t, master)
	hot := func(dir shardcast.HotDirection) bool {
		return slices.ContainsFunc(b.HotChannels(), func(h shardcast.HotChannel) bool {
			return h.Channel == "hot" && h.Direction == dir && h.Node == master && h.Share > 0.5
		})
	}
	ok := waitFor(20*time.Second, func() bool {
		for i := range 100 {
			ch := "hot"
			if i%5 == 0 {
				ch = cold[i/5%len(cold)]
			}
			require.NoError(t, b.Publish(ctx, ch, []byte("x")))
		}
		return hot(shardcast.HotIn) && hot(shardcast.HotOut) && slices.ContainsFunc(evs.Of(shardcast.EventHotChannel), func(ev shardcast.Event) bool {
			return ev.Shard == master && slices.Equal(ev.Channels, []string{"hot"})
		})
	})
	assert.True(t, ok, "hot channel not reported on %s: %v, events %v", master, b.HotChannels(), evs.Of(shardcast.EventHotChannel))
}
