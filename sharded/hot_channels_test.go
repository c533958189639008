package sharded

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestHotChannels: one channel gets most of the traffic; HotChannels
// names it for both directions on a broker that publishes and subscribes,
// with its instance as the node and most of the node's share, and an
// EventHotChannel names it once a window ended. A publish-only broker
// counts its publishes against no node; one with detection off reports
// nothing.
func TestHotChannels(t *testing.T) {
	s := startServers(t, 1)[0]
	var evs events
	hot := shardcast.Options{HotSampleRate: 0.5, HotWindow: 100 * time.Millisecond, OnEvent: evs.Add}
	both := hot
	both.Handler = func(shardcast.Message) {}
	node := newBroker(t, Config{Addrs: addrs(s), Options: both})
	pubOnly := newBroker(t, Config{Addrs: addrs(s), Options: hot})
	off := newBroker(t, Config{Addrs: addrs(s), Options: shardcast.Options{HotSampleRate: -1}})
	ctx := context.Background()
	cold := channelNames("hot:cold:", 10)
	require.NoError(t, node.Subscribe(ctx, append(cold, "hot:hot")...))

	find := func(b *Broker, dir shardcast.HotDirection) (shardcast.HotChannel, bool) {
		i := slices.IndexFunc(b.HotChannels(), func(h shardcast.HotChannel) bool {
			return h.Channel == "hot:hot" && h.Direction == dir
		})
		if i < 0 {
			return shardcast.HotChannel{}, false
		}
		return b.HotChannels()[i], true
	}
	// Publish 80% to one channel until a window with it has ended on every
	// broker and the event came; windows end on traffic, so keep it going.
	waitFor(t, "hot:hot reported", func() bool {
		for i := range 100 {
			ch := "hot:hot"
			if i%5 == 0 {
				ch = cold[i/5%len(cold)]
			}
			require.NoError(t, node.Publish(ctx, ch, []byte("x")))
			require.NoError(t, pubOnly.Publish(ctx, ch, []byte("x")))
			require.NoError(t, off.Publish(ctx, ch, []byte("x")))
		}
		_, in := find(node, shardcast.HotIn)
		_, out := find(node, shardcast.HotOut)
		_, pubOut := find(pubOnly, shardcast.HotOut)
		return in && out && pubOut && slices.ContainsFunc(evs.Of(shardcast.EventHotChannel), func(ev shardcast.Event) bool {
			return ev.Shard == s.Addr()
		})
	})
	for _, dir := range []shardcast.HotDirection{shardcast.HotIn, shardcast.HotOut} {
		h, _ := find(node, dir)
		assert.Equal(t, s.Addr(), h.Node, dir)
		assert.Greater(t, h.Share, 0.5, dir)
		assert.Positive(t, h.Rate, dir)
		assert.Equal(t, 100*time.Millisecond, h.Until.Sub(h.Since), dir)
	}
	h, _ := find(pubOnly, shardcast.HotOut)
	assert.Empty(t, h.Node, "a publish-only broker knows no subscribe link to name")
	for _, ev := range evs.Of(shardcast.EventHotChannel) {
		assert.Equal(t, []string{"hot:hot"}, ev.Channels, "only the hot channel is over 20%")
		assert.Positive(t, ev.Count)
	}
	assert.Nil(t, off.HotChannels(), "detection off")
}
