package cluster

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/layoutkey"
	"github.com/shardcast/shardcast/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRelayoutEventsNameNoBarrier: a re-layout's barriers are the
// engine's own channels. Every subscribe connection is killed while they
// are subscribed (from the prepare to the finish), the application's
// channels in two of 16 partitions and barriers alone in some others:
// EventInterrupted and EventRestored name every one of the application's
// channels, no barrier, and only the partitions of those channels.
func TestRelayoutEventsNameNoBarrier(t *testing.T) {
	const app = "own:"
	c := redistest.StartCluster(t, 3, 0)
	from, err := shardcast.NewLayout(16, "")
	require.NoError(t, err)
	to, err := shardcast.NewLayout(32, "")
	require.NoError(t, err)
	chans := inPartitions(from, channelsPerPartition(from, 5, "own."), []int{3, 11})
	var evs eventLog
	b := newBroker(t, Config{Addrs: c.Seeds(), Partitions: 16,
		Options:   shardcast.Options{Handler: newRecorder().handle, OnEvent: evs.Add},
		Agreement: relayoutAgreement(app)})
	ctx := testCtx(t, 30*time.Second)
	require.NoError(t, b.Subscribe(ctx, chans...))
	allowed := map[int]bool{}
	for _, ch := range chans {
		allowed[from.Partition(ch)], allowed[to.Partition(ch)] = true, true
	}

	barrier := func(ch string) bool { return strings.Contains(ch, layoutkey.Barrier(shardcast.Agreement{}, "")) }
	mark := -1
	cfg := clusterRelayoutConfig(c, app, 32)
	cfg.OnPhase = func(p shardcast.RelayoutPhaseReport) {
		if p.Phase != shardcast.PhasePrepare {
			return
		}
		alone := 0
		for _, path := range b.core.Paths {
			if w := path.Wanted(); len(w) == 1 && barrier(w[0]) {
				alone++
			}
		}
		require.NotZero(t, alone, "a partition wants a barrier alone")
		masters, err := c.Masters(ctx)
		require.NoError(t, err)
		mark = evs.Len()
		for _, m := range masters {
			_, err := m.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub")
			require.NoError(t, err)
		}
		require.True(t, waitFor(20*time.Second, func() bool {
			var restored []string
			for _, ev := range evs.Since(mark) {
				if ev.Kind == shardcast.EventRestored {
					restored = append(restored, ev.Channels...)
				}
			}
			return !slices.ContainsFunc(chans, func(ch string) bool { return !slices.Contains(restored, ch) })
		}), "EventRestored naming every channel")
	}
	_, err = Relayout(ctx, cfg)
	require.NoError(t, err)
	require.NotEqual(t, -1, mark, "the prepare completed")

	interrupted := map[string]bool{}
	for _, ev := range evs.All() {
		for _, ch := range ev.Channels {
			assert.False(t, barrier(ch), "%v names barrier %s", ev, ch)
		}
		if ev.Kind != shardcast.EventInterrupted && ev.Kind != shardcast.EventRestored {
			continue
		}
		assert.NotEmpty(t, ev.Channels, "%v names no channel", ev)
		for _, p := range ev.Partitions {
			assert.True(t, allowed[p], "%v names partition %d, none of whose channels the application subscribed", ev, p)
		}
		if ev.Kind == shardcast.EventInterrupted {
			for _, ch := range ev.Channels {
				interrupted[ch] = true
			}
		}
	}
	for _, ch := range chans {
		assert.True(t, interrupted[ch], "%s reported interrupted", ch)
	}
	assert.Empty(t, evs.Unrestored(), "channels reported lost and never restored")
}
