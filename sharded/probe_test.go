package sharded

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// dropAll picks every message push for redistest.Proxy to swallow.
func dropAll(kind, channel string) bool { return true }

// TestProbesCatchASilentPath: a subscribe connection whose message pushes
// stop arriving while it still answers pings is reported Interrupted with
// ErrSilentPath by the delivery probes, resubscribed, and reported
// Restored once probes come back, after which messages flow. Without
// probes the same fault stays silent: no event, nothing delivered.
func TestProbesCatchASilentPath(t *testing.T) {
	srv := redistest.StartStandalone(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	pub := newBroker(t, Config{Addrs: addrs(srv)})

	t.Run("probes", func(t *testing.T) {
		proxy := redistest.StartProxy(t, srv.Addr())
		rec := newRecorder()
		var evs events
		sub := newBroker(t, Config{Addrs: []string{proxy.Addr()}, Agreement: sameServerOtherName,
			Options: shardcast.Options{Handler: rec.handle, OnEvent: evs.Add},
			Conn:    shardcast.ConnOptions{ProbeInterval: 50 * time.Millisecond, ProbeTimeout: 200 * time.Millisecond}})
		require.NoError(t, sub.Subscribe(ctx, "watched"))
		require.NoError(t, pub.Publish(ctx, "watched", []byte("before")))
		waitFor(t, "the first message", func() bool { return rec.count("watched") == 1 })

		proxy.DropPushes(dropAll)
		silentAt := time.Now()
		waitFor(t, "the silent path to be reported", func() bool { return len(evs.Of(shardcast.EventInterrupted)) > 0 })
		ev := evs.Of(shardcast.EventInterrupted)[0]
		t.Logf("FIGURE probes: silent path reported %v after the pushes stopped (interval 50ms, timeout 200ms)", time.Since(silentAt).Round(time.Millisecond))
		assert.ErrorIs(t, ev.Err, shardcast.ErrSilentPath)
		assert.Equal(t, []string{"watched"}, ev.Channels, "the probe channel is not reported")
		assert.Empty(t, evs.Of(shardcast.EventRestored), "no restore while probes stay lost")

		proxy.DropPushes(nil)
		waitFor(t, "the restore", func() bool { return len(evs.Of(shardcast.EventRestored)) > 0 })
		assert.Equal(t, []string{"watched"}, evs.Of(shardcast.EventRestored)[0].Channels)
		require.NoError(t, pub.Publish(ctx, "watched", []byte("after")))
		waitFor(t, "delivery after the restore", func() bool { return rec.count("watched") == 2 })
		assert.Equal(t, 1, sub.Stats().Channels, "probe channels are not counted")
		assert.Zero(t, sub.Stats().Published, "nor are probes counted as Publish calls")
	})

	t.Run("no probes", func(t *testing.T) {
		proxy := redistest.StartProxy(t, srv.Addr())
		rec := newRecorder()
		var evs events
		sub := newBroker(t, Config{Addrs: []string{proxy.Addr()}, Agreement: sameServerOtherName,
			Options: shardcast.Options{Handler: rec.handle, OnEvent: evs.Add}})
		require.NoError(t, sub.Subscribe(ctx, "watched"))
		proxy.DropPushes(dropAll)
		for i := range 5 {
			require.NoError(t, pub.Publish(ctx, "watched", []byte(strconv.Itoa(i))))
		}
		waitFor(t, "the proxy to swallow the messages", func() bool { return proxy.Dropped() == 5 })
		// A health ping goes through after the loss, proving the
		// connection looks healthy while its messages are gone.
		pings := func() int64 {
			st, err := srv.CommandStats(ctx)
			require.NoError(t, err)
			return st["ping"]
		}
		before := pings()
		waitFor(t, "a health ping after the loss", func() bool { return pings() > before })
		assert.Zero(t, rec.count("watched"), "nothing was delivered")
		assert.Empty(t, evs.All(), "and nothing was reported: the loss is silent without probes")
	})
}

// sameServerOtherName is the Agreement of a subscriber that reaches the
// publisher's instance through a proxy: the layout record compares
// addresses as configured, and would take the proxy's for another layout.
var sameServerOtherName = shardcast.Agreement{Off: true}

// TestRolledBackFirstChannelTakesItsProbe: a Subscribe of a path's first
// channel whose ctx ends while Redis has not answered is undone, and the
// probe channel that rode along with it is unsubscribed too: nothing stays
// subscribed in Redis for a path that wants nothing.
func TestRolledBackFirstChannelTakesItsProbe(t *testing.T) {
	srv := redistest.StartStandalone(t)
	b := newBroker(t, Config{Addrs: addrs(srv), Options: shardcast.Options{Handler: newRecorder().handle},
		Conn: shardcast.ConnOptions{ProbeInterval: time.Hour}})
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	require.NoError(t, b.Subscribe(ctx, "warm")) // the subscribe connection is up
	require.NoError(t, b.Unsubscribe(ctx, "warm"))
	waitFor(t, "nothing subscribed", func() bool { return pubsubChannels(t, srv) == 0 })

	require.NoError(t, srv.Pause())
	short, stop := context.WithTimeout(ctx, 300*time.Millisecond)
	err := b.Subscribe(short, "cut")
	stop()
	require.NoError(t, srv.Resume())
	require.ErrorIs(t, err, context.DeadlineExceeded)
	waitFor(t, "the undo to reach Redis", func() bool { return pubsubChannels(t, srv) == 0 })
	// The undo is one UNSUBSCRIBE, answered by now; look again a moment
	// later, in case a late push was still under way.
	time.Sleep(100 * time.Millisecond)
	assert.Zero(t, pubsubChannels(t, srv), "a channel stayed subscribed after the rollback")
}
