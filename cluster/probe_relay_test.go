package cluster

import (
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// masterSpublish sums the SPUBLISH calls masters took so far.
func masterSpublish(t *testing.T, masters []*redistest.Server) int64 {
	t.Helper()
	ctx := testCtx(t, 10*time.Second)
	var n int64
	for _, m := range masters {
		stats, err := m.CommandStats(ctx)
		require.NoError(t, err)
		n += stats["spublish"]
	}
	return n
}

// TestProbesPerRelay: the probes SubscribeOn turns on cost one SPUBLISH
// per replica connection per interval, not one per partition: a broker
// subscribed in every partition of a 3-shard cluster sends about 3 a
// second with Replicas, at most that with AllNodes (a shard it subscribes
// on the master is not probed), while probes the user turns on with
// Masters still go through every partition.
func TestProbesPerRelay(t *testing.T) {
	c := replicaCluster(t)
	ctx := testCtx(t, 2*time.Minute)
	masters, err := c.Masters(ctx)
	require.NoError(t, err)
	for _, tc := range []struct {
		on       SubscribeOn
		interval time.Duration
	}{{Replicas, 0}, {AllNodes, 0}, {Masters, 200 * time.Millisecond}} {
		t.Run(tc.on.String(), func(t *testing.T) {
			sub := newBroker(t, Config{Addrs: c.Seeds(), SubscribeOn: tc.on,
				Agreement: shardcast.Agreement{App: "ppr." + tc.on.String() + ":"},
				Conn:      shardcast.ConnOptions{ProbeInterval: tc.interval},
				Options:   shardcast.Options{Handler: func(shardcast.Message) {}}})
			l := sub.Layout()
			require.NoError(t, sub.Subscribe(ctx, channelsPerPartition(l, 1, "ppr."+tc.on.String()+".")...))
			interval := tc.interval
			if interval == 0 {
				interval = DefaultRelayProbeInterval
			}
			const rounds = 3
			before := masterSpublish(t, masters)
			time.Sleep(rounds * interval)
			probes := masterSpublish(t, masters) - before
			t.Logf("FIGURE probes %v: %d SPUBLISH in %d intervals of %v, %d partitions, subscribed on %v",
				tc.on, probes, rounds, interval, l.Partitions(), slices.Sorted(maps.Keys(sub.SubscribedOn())))
			switch tc.on {
			case Replicas:
				// Three wires, probed once per interval; one tick more
				// than the rounds may fall in the span, and the slack
				// covers a retried probe.
				assert.GreaterOrEqual(t, probes, int64(3), "the replicas are probed")
				assert.LessOrEqual(t, probes, int64(3*(rounds+2)), "one probe per replica connection per interval")
			case AllNodes:
				assert.LessOrEqual(t, probes, int64(3*(rounds+2)), "one probe per replica connection per interval")
			case Masters:
				assert.GreaterOrEqual(t, probes, int64(l.Partitions()*rounds/2), "every partition probed")
			}
		})
	}
}

// TestRelaySilentTogether: a replica that stops relaying (a proxy in front
// of it drops every message push, while PINGs and commands pass) has all
// the partitions a broker subscribed on it reported in one
// EventInterrupted with ErrSilentPath and one loss start; they move to the
// shard's other replica, deliver there while the fault lasts, and are
// reported Restored once probes come back through it.
func TestRelaySilentTogether(t *testing.T) {
	c := replicaCluster(t)
	ctx := testCtx(t, 2*time.Minute)
	masters, err := c.Masters(ctx)
	require.NoError(t, err)
	replicas, err := c.ReplicasOf(ctx, masters[0])
	require.NoError(t, err)
	require.Len(t, replicas, 2)
	proxy := announceThrough(t, c, replicas[0], "a replica", func(m shardcast.SlotMap, proxy string) bool {
		return slices.ContainsFunc(m.Ranges, func(r shardcast.SlotRange) bool { return slices.Contains(r.Replicas, proxy) })
	})

	pub := newBroker(t, Config{Addrs: c.Seeds()})
	l := pub.Layout()
	channels := channelsPerPartition(l, 1, "rst.")
	// Brokers numbered in turn pick the shard's two replicas in turn: of
	// two, one subscribes through the proxy.
	var sub *Broker
	var rec *recorder
	var events *eventLog
	for i := range 2 {
		r, ev := newRecorder(), &eventLog{}
		b := newBroker(t, Config{Addrs: c.Seeds(), SubscribeOn: Replicas, TopologyInterval: time.Second,
			Agreement: shardcast.Agreement{App: "rst:"},
			Options:   shardcast.Options{Handler: r.handle, OnEvent: ev.Add}})
		require.NoError(t, b.Subscribe(ctx, channels...), "broker %d", i)
		if _, ok := b.SubscribedOn()[proxy.Addr()]; ok {
			sub, rec, events = b, r, ev
		}
	}
	require.NotNil(t, sub, "neither broker subscribed through the proxy")
	onProxy := sortedCopy(sub.SubscribedOn()[proxy.Addr()])
	require.NotEmpty(t, onProxy)
	// publishUntil publishes to every channel, again every half second,
	// until each received a message published after the call began.
	publishUntil := func(t *testing.T, step string) {
		t.Helper()
		mark := time.Now()
		var silent []string
		ok := waitFor(30*time.Second, func() bool {
			publishAll(t, pub, channels, "x")
			time.Sleep(500 * time.Millisecond)
			silent = rec.silentSince(channels, mark)
			return len(silent) == 0
		})
		require.True(t, ok, "%s: %d of %d channels silent, e.g. %v", step, len(silent), len(channels), head(silent, 5))
	}
	publishUntil(t, "before the fault")

	proxy.DropPushes(func(kind, _ string) bool { return kind == "smessage" })
	t.Cleanup(func() { proxy.DropPushes(nil) })
	dropped := time.Now()
	silentEvent := func() (shardcast.Event, bool) {
		for _, ev := range events.Of(shardcast.EventInterrupted) {
			if errors.Is(ev.Err, shardcast.ErrSilentPath) {
				return ev, true
			}
		}
		return shardcast.Event{}, false
	}
	require.True(t, waitFor(20*time.Second, func() bool { _, ok := silentEvent(); return ok }),
		"the silent replica was never reported: %v", events.All())
	ev, _ := silentEvent()
	t.Logf("FIGURE silent replica: %d partitions reported in one event %v after its pushes stopped",
		len(ev.Partitions), time.Since(dropped).Round(time.Millisecond))
	assert.Equal(t, onProxy, sortedCopy(ev.Partitions), "every partition on the replica, in its first event")
	assert.Equal(t, proxy.Addr(), ev.Shard)
	assert.True(t, ev.Since.Before(dropped), "the loss dates from the last probe back, before the fault (%v, fault at %v)",
		ev.Since.Format("15:04:05.000"), dropped.Format("15:04:05.000"))

	require.True(t, waitFor(10*time.Second, func() bool {
		_, still := sub.SubscribedOn()[proxy.Addr()]
		return !still
	}), "the partitions never left the silent replica")
	// The fault lasts: the channels deliver through the other replica.
	publishUntil(t, "after the move")
	restored := func() map[int]bool {
		parts := map[int]bool{}
		for _, ev := range events.Of(shardcast.EventRestored) {
			for _, p := range ev.Partitions {
				parts[p] = true
			}
		}
		return parts
	}
	require.True(t, waitFor(20*time.Second, func() bool {
		got := restored()
		return !slices.ContainsFunc(onProxy, func(p int) bool { return !got[p] })
	}), "not every silent partition was restored: %v", events.All())
}
