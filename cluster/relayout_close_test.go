package cluster

import (
	"strconv"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRelayoutCloseDeliversHeld: a broker closed while it holds back,
// during a re-layout's switch, messages that came under the new layout
// hands them to its Handler before Close returns; they were once dropped
// without a word. The prefix changes, so every channel moves.
func TestRelayoutCloseDeliversHeld(t *testing.T) {
	const app = "close-held:"
	c := redistest.StartCluster(t, 3, 0)
	channels := numbered("close-held.", 60)
	rec := newRecorder()
	sub, err := New(Config{Addrs: c.Seeds(), Agreement: relayoutAgreement(app),
		Options: shardcast.Options{Handler: rec.handle}})
	require.NoError(t, err)
	closed := false
	defer func() {
		if !closed {
			require.NoError(t, sub.Close())
		}
	}()
	pub := newBroker(t, Config{Addrs: c.Seeds(), Agreement: relayoutAgreement(app)})
	ctx := testCtx(t, time.Minute)
	require.NoError(t, sub.Subscribe(ctx, channels...))

	cfg := clusterRelayoutConfig(c, app, 0)
	prefix := "moved:"
	cfg.Prefix = &prefix
	cfg.OnPhase = func(p shardcast.RelayoutPhaseReport) {
		if p.Phase != shardcast.PhaseSwitch || closed {
			return
		}
		// Both brokers publish under the new prefix now; sub holds what
		// comes until the drain's barriers, sent after this returns.
		for i, ch := range channels {
			require.NoError(t, pub.Publish(ctx, ch, []byte(strconv.Itoa(i))))
		}
		require.True(t, waitFor(20*time.Second, func() bool { return sub.hand.PeakHeld() >= len(channels) }), "the messages held")
		require.NoError(t, sub.Close())
		closed = true
	}
	_, err = Relayout(testCtx(t, 30*time.Second), cfg) // sub left in the middle: the outcome is not the point
	t.Logf("relayout: %v", err)
	require.True(t, closed, "the switch was reported")
	for _, ch := range channels {
		assert.Equal(t, 1, rec.count(ch), "%s: its held message reached the Handler before Close returned", ch)
	}
}
