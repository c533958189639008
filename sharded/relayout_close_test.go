package sharded

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/jump"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRelayoutCloseDeliversHeld: a broker closed while it holds back,
// during a re-layout's switch, messages of moving channels that came under
// the new layout hands them to its Handler before Close returns; they
// were once dropped without a word.
func TestRelayoutCloseDeliversHeld(t *testing.T) {
	servers := startServers(t, 3)
	ab, abc := addrs(servers[0], servers[1]), addrs(servers...)
	channels := channelNames("close-held-", 60)
	rec := newRecorder()
	sub, err := New(Config{Addrs: ab, Agreement: shardcast.Agreement{Heartbeat: relayoutHeartbeat},
		Options: shardcast.Options{Handler: rec.handle}})
	require.NoError(t, err)
	closed := false
	defer func() {
		if !closed {
			require.NoError(t, sub.Close())
		}
	}()
	pub := newBroker(t, Config{Addrs: ab, Agreement: shardcast.Agreement{Heartbeat: relayoutHeartbeat}})
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	require.NoError(t, sub.Subscribe(ctx, channels...))

	var moving []string
	cfg := relayoutConfig(ab[0], abc)
	cfg.OnPhase = func(p PhaseReport) {
		if p.Phase != shardcast.PhaseSwitch || closed {
			return
		}
		// Both brokers publish moving channels to the new instance now;
		// sub holds what comes until the drain's barriers, which are
		// sent after this returns.
		for _, ch := range channels {
			if jump.Channel(ch, 3) == 2 {
				moving = append(moving, ch)
			}
		}
		for i, ch := range moving {
			require.NoError(t, pub.Publish(ctx, ch, []byte(strconv.Itoa(i))))
		}
		waitFor(t, "the moving channels' messages held", func() bool { return sub.hand.PeakHeld() >= len(moving) })
		require.NoError(t, sub.Close())
		closed = true
	}
	rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
	defer rcancel()
	_, err = Relayout(rctx, cfg) // sub left in the middle: the outcome is not the point
	t.Logf("relayout: %v", err)
	require.True(t, closed, "the switch was reported")
	require.NotEmpty(t, moving)
	for _, ch := range moving {
		assert.Equal(t, 1, rec.count(ch), "%s: its held message reached the Handler before Close returned", ch)
	}
}
