package sharded

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/engine"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestProbesAreNotHotTraffic: delivery probes are the engine's own
// traffic; however often they run, the probe channel is never among the
// hot channels (it was reported hot on a broker with little traffic of
// its own, and took a share from the real channels).
func TestProbesAreNotHotTraffic(t *testing.T) {
	s := startServers(t, 1)[0]
	var evs events
	b := newBroker(t, Config{Addrs: addrs(s), Options: shardcast.Options{
		Handler: func(shardcast.Message) {}, OnEvent: evs.Add, HotSampleRate: 1, HotWindow: 300 * time.Millisecond,
	}, Conn: shardcast.ConnOptions{ProbeInterval: 5 * time.Millisecond, ProbeTimeout: time.Second}})
	require.NoError(t, b.Subscribe(context.Background(), "app:quiet"))
	// Several hot windows of probes every 5 ms.
	waitFor(t, "probes delivered", func() bool { return b.Stats().Received >= 200 })
	time.Sleep(700 * time.Millisecond)
	for _, h := range b.HotChannels() {
		assert.False(t, strings.HasPrefix(h.Channel, engine.ProbeChannelPrefix), "probe channel listed as hot: %+v", h)
	}
	for _, ev := range evs.Of(shardcast.EventHotChannel) {
		for _, ch := range ev.Channels {
			assert.False(t, strings.HasPrefix(ch, engine.ProbeChannelPrefix), "EventHotChannel for a probe: %+v", ev)
		}
	}
}
