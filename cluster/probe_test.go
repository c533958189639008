package cluster

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// announceVia puts a proxy in front of master and makes the cluster name
// the proxy as master's address (cluster-announce-port), so that every
// broker reaches master through it. It returns once every node's CLUSTER
// SLOTS says so.
func announceVia(t *testing.T, c *redistest.Cluster, master *redistest.Server, slot uint16) *redistest.Proxy {
	t.Helper()
	return announceThrough(t, c, master, "master of slot "+strconv.Itoa(int(slot)), func(m shardcast.SlotMap, proxy string) bool {
		owner, _ := m.MasterOf(slot)
		return owner == proxy
	})
}

// announceThrough puts a proxy in front of node, makes the cluster name
// the proxy as node's address (cluster-announce-port), and returns once
// listed holds for every node's CLUSTER SLOTS: the proxy is named there
// as role says.
func announceThrough(t *testing.T, c *redistest.Cluster, node *redistest.Server, role string, listed func(m shardcast.SlotMap, proxy string) bool) *redistest.Proxy {
	t.Helper()
	ctx := testCtx(t, 30*time.Second)
	proxy := redistest.StartProxy(t, node.Addr())
	_, err := node.Do(ctx, "CONFIG", "SET", "cluster-announce-port", strconv.Itoa(proxy.Port()))
	require.NoError(t, err)
	last := "no CLUSTER SLOTS read yet"
	require.True(t, waitFor(20*time.Second, func() bool {
		for _, s := range c.Nodes() {
			reply, err := s.Do(ctx, "CLUSTER", "SLOTS")
			if err != nil {
				last = err.Error()
				return false
			}
			m, err := ParseSlots(reply, s.Addr())
			if err != nil {
				last = err.Error()
				return false
			}
			if !listed(m, proxy.Addr()) {
				last = s.Addr() + " does not yet"
				return false
			}
		}
		return true
	}), "the cluster never named the proxy %s as %s (for %s): %s", proxy.Addr(), role, node.Addr(), last)
	return proxy
}

// TestProbesCatchASilentPartition: a proxy in front of one master drops
// the message pushes of one partition's channels, while the other
// partitions on the same subscribe connection, PINGs and commands pass.
// With delivery probes on, that partition, and only it, is reported
// Interrupted with ErrSilentPath, resubscribed, and reported Restored once
// the pushes flow again. Without probes the same fault stays silent: no
// event, nothing delivered on the partition.
func TestProbesCatchASilentPartition(t *testing.T) {
	c := redistest.StartCluster(t, 2, 0)
	ctx := testCtx(t, 2*time.Minute)
	masters, err := c.Masters(ctx)
	require.NoError(t, err)
	victim := masters[0]
	// The publisher polls often, to learn the proxy's address soon.
	pub := newBroker(t, Config{Addrs: c.Seeds(), TopologyInterval: 100 * time.Millisecond})
	l := pub.Layout()
	onVictim := sortedCopy(pub.partitionsOf(victim.Addr()))
	silent, neighbour := onVictim[0], onVictim[1]
	elsewhere := sortedCopy(pub.partitionsOf(masters[1].Addr()))[0]
	all := channelsPerPartition(l, 2, "probe.")
	silentChans := inPartitions(l, all, []int{silent})
	otherChans := inPartitions(l, all, []int{neighbour, elsewhere})
	watched := append(slices.Clone(silentChans), otherChans...)
	slices.Sort(silentChans)

	proxy := announceVia(t, c, victim, l.Slot(silent))
	// The publisher reaches the victim through the proxy from now on too.
	require.True(t, waitFor(20*time.Second, func() bool { return pub.masterOf(silent) == proxy.Addr() }),
		"the publisher never polled the new address")
	silentKey := l.PartitionKey(silent, "")
	dropSilent := func(kind, channel string) bool { return kind == "smessage" && strings.HasPrefix(channel, silentKey) }
	// publishRound publishes one message to every channel and waits
	// until the given ones received it.
	publishRound := func(t *testing.T, rec *recorder, arrive []string) {
		t.Helper()
		mark := time.Now()
		publishAll(t, pub, watched, "x")
		rec.waitSilentSince(t, arrive, mark, 20*time.Second)
	}

	t.Run("probes", func(t *testing.T) {
		rec, events := newRecorder(), &eventLog{}
		sub := newBroker(t, Config{Addrs: c.Seeds(),
			Options: shardcast.Options{Handler: rec.handle, OnEvent: events.Add},
			Conn:    shardcast.ConnOptions{ProbeInterval: 100 * time.Millisecond, ProbeTimeout: time.Second}})
		require.NoError(t, sub.Subscribe(ctx, watched...))
		require.Equal(t, proxy.Addr(), sub.masterOf(silent))
		publishRound(t, rec, watched)
		resubscribes := func() uint64 {
			for _, n := range sub.NodeStats() {
				if n.Addr == proxy.Addr() {
					return n.ResubscribeCommands
				}
			}
			return 0
		}
		before := resubscribes()

		proxy.DropPushes(dropSilent)
		droppedAt := time.Now()
		require.True(t, waitFor(20*time.Second, func() bool { return len(events.Of(shardcast.EventInterrupted)) > 0 }),
			"the silent partition was never reported")
		t.Logf("FIGURE cluster probes: silent partition reported %v after its pushes stopped (interval 100ms, timeout 1s)",
			time.Since(droppedAt).Round(time.Millisecond))
		// The resubscribe that follows does not end the silent spell: the
		// probes still do not come back.
		require.True(t, waitFor(20*time.Second, func() bool { return resubscribes() > before }),
			"the silent partition was not resubscribed")
		publishRound(t, rec, otherChans) // requires that the other partitions deliver
		for _, ch := range silentChans {
			assert.Equal(t, 1, rec.count(ch), "nothing reaches %s while its pushes are dropped", ch)
		}
		assert.Empty(t, events.Of(shardcast.EventRestored), "no restore while probes stay lost")

		proxy.DropPushes(nil)
		require.True(t, waitFor(20*time.Second, func() bool { return len(events.Of(shardcast.EventRestored)) > 0 }),
			"the partition was never restored")
		publishRound(t, rec, watched)

		interrupted, restored := events.Of(shardcast.EventInterrupted), events.Of(shardcast.EventRestored)
		require.Len(t, interrupted, 1, "one silent spell, reported once: %v", events.All())
		require.Len(t, restored, 1, "%v", events.All())
		ev := interrupted[0]
		assert.ErrorIs(t, ev.Err, shardcast.ErrSilentPath)
		assert.Equal(t, []int{silent}, ev.Partitions, "exactly the silent partition")
		assert.Equal(t, silentChans, sortedStrings(ev.Channels), "its channels, without the probe channel")
		assert.Equal(t, proxy.Addr(), ev.Shard)
		assert.Equal(t, []int{silent}, restored[0].Partitions)
		assert.Equal(t, silentChans, sortedStrings(restored[0].Channels))
		assert.Len(t, events.All(), 2, "no other event: %v", events.All())
		st := sub.Stats()
		assert.Equal(t, len(watched), st.Channels, "probe channels are not counted")
		assert.Zero(t, st.Published, "nor are probes counted as Publish calls")
		// A worker stores its delivered count after the handler returns
		// (every few calls and at the end of a batch): wait for it.
		assert.True(t, waitFor(5*time.Second, func() bool { return sub.Stats().Delivered == uint64(rec.seen.Load()) }),
			"nor delivered: %d delivered, %d handled", sub.Stats().Delivered, rec.seen.Load())
	})

	t.Run("no probes", func(t *testing.T) {
		rec, events := newRecorder(), &eventLog{}
		sub := newBroker(t, Config{Addrs: c.Seeds(), Options: shardcast.Options{Handler: rec.handle, OnEvent: events.Add}})
		require.NoError(t, sub.Subscribe(ctx, watched...))
		publishRound(t, rec, watched)

		proxy.DropPushes(dropSilent)
		t.Cleanup(func() { proxy.DropPushes(nil) })
		dropped := proxy.Dropped()
		const rounds = 5
		for range rounds {
			publishRound(t, rec, otherChans)
		}
		require.True(t, waitFor(20*time.Second, func() bool { return proxy.Dropped() == dropped+rounds*int64(len(silentChans)) }),
			"the proxy dropped %d pushes, want %d", proxy.Dropped()-dropped, rounds*len(silentChans))
		// A health ping and a ROLE check go through the proxy after the
		// loss: the connections look healthy while the messages are gone.
		stats, err := victim.CommandStats(ctx)
		require.NoError(t, err)
		require.True(t, waitFor(20*time.Second, func() bool {
			now, err := victim.CommandStats(ctx)
			return err == nil && now["ping"] > stats["ping"] && now["role"] > stats["role"]
		}), "no health check reached the master")
		for _, ch := range silentChans {
			assert.Equal(t, 1, rec.count(ch), "nothing reached %s after the first round", ch)
		}
		assert.Empty(t, events.All(), "and nothing was reported: the loss is silent without probes")
	})
}

// sortedStrings returns a sorted copy of s.
func sortedStrings(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}
