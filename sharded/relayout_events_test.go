package sharded

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/layoutkey"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRelayoutEventsNameNoBarrier: a re-layout's barriers are the
// engine's own channels. Every subscribe connection is killed while they
// are subscribed (from the prepare to the finish): EventInterrupted and
// EventRestored name every one of the application's channels and no
// barrier, a connection that carried a barrier alone raises neither, and
// no channel is left reported lost once the re-layout is over.
func TestRelayoutEventsNameNoBarrier(t *testing.T) {
	servers := startServers(t, 3)
	ab, abc := addrs(servers[0], servers[1]), addrs(servers...)
	var evs events
	const conns = 4
	b := newBroker(t, Config{Addrs: ab, Conn: shardcast.ConnOptions{SubscribeConns: conns},
		Options:   shardcast.Options{Handler: newRecorder().handle, OnEvent: evs.Add},
		Agreement: shardcast.Agreement{Heartbeat: relayoutHeartbeat}})
	// Channels on each instance's first connection only: the barrier is
	// alone on the other ones.
	var chans []string
	for _, ch := range channelNames("own-", 200) {
		if (router{b}).PathOf(ch)%conns == 0 {
			chans = append(chans, ch)
		}
	}
	require.NotEmpty(t, chans)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	require.NoError(t, b.Subscribe(ctx, chans...))

	barrier := func(ch string) bool { return strings.Contains(ch, layoutkey.Barrier(shardcast.Agreement{}, "")) }
	mark := -1
	cfg := relayoutConfig(ab[0], abc)
	cfg.OnPhase = func(p PhaseReport) {
		if p.Phase != shardcast.PhasePrepare {
			return
		}
		alone, shared := 0, 0
		for _, path := range b.core.Paths {
			w := path.Wanted()
			if slices.ContainsFunc(w, barrier) {
				if len(w) == 1 {
					alone++
				} else {
					shared++
				}
			}
		}
		require.NotZero(t, alone, "a connection carries a barrier alone")
		require.NotZero(t, shared, "a connection carries a barrier and the application's channels")
		mark = evs.Len()
		for _, s := range servers {
			_, err := s.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub")
			require.NoError(t, err)
		}
		waitFor(t, "EventRestored naming every channel", func() bool {
			var restored []string
			for _, ev := range evs.Since(mark) {
				if ev.Kind == shardcast.EventRestored {
					restored = append(restored, ev.Channels...)
				}
			}
			return !slices.ContainsFunc(chans, func(ch string) bool { return !slices.Contains(restored, ch) })
		})
	}
	_, err := Relayout(ctx, cfg)
	require.NoError(t, err)
	require.NotEqual(t, -1, mark, "the prepare completed")

	interrupted := map[string]bool{}
	for _, ev := range evs.All() {
		for _, ch := range ev.Channels {
			assert.False(t, barrier(ch), "%v names barrier %s", ev, ch)
		}
		if ev.Kind == shardcast.EventInterrupted || ev.Kind == shardcast.EventRestored {
			assert.NotEmpty(t, ev.Channels, "%v names no channel", ev)
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
