package cluster

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/pubconn"
	"github.com/shardcast/shardcast/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// pubOf returns the broker's publishing connection to addr, or nil.
func pubOf(b *Broker, addr string) *pubconn.Pub {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.pubs[addr]
}

// routedTo reports whether the broker's route sends partition p to its
// publishing connection of addr.
func routedTo(b *Broker, p int, addr string) bool {
	want := pubOf(b, addr)
	route := b.route.Load()
	return want != nil && route != nil && (*route)[p] == want
}

// spublishStats returns INFO commandstats calls and rejected_calls of
// SPUBLISH on s: a redirected (MOVED) command counts as rejected, not as a
// call.
func spublishStats(t *testing.T, s *redistest.Server) (calls, rejected int64) {
	t.Helper()
	return cmdStats(t, s, "spublish")
}

// cmdStats returns INFO commandstats calls and rejected_calls of the
// command named (lower case) on s: a command refused before it ran (MOVED,
// ASK, TRYAGAIN) counts as rejected, not as a call.
func cmdStats(t *testing.T, s *redistest.Server, name string) (calls, rejected int64) {
	t.Helper()
	info, err := s.Info(testCtx(t, 5*time.Second), "commandstats")
	require.NoError(t, err)
	for field := range strings.SplitSeq(info["cmdstat_"+name], ",") {
		k, v, _ := strings.Cut(field, "=")
		n, _ := strconv.ParseInt(v, 10, 64)
		switch k {
		case "calls":
			calls = n
		case "rejected_calls":
			rejected = n
		}
	}
	return calls, rejected
}

// sequencer publishes numbered messages, one goroutine per channel so that
// each channel's numbers leave in order, and remembers the last number of
// each channel.
type sequencer struct {
	pub  *Broker
	next map[string]uint64
}

// round publishes n more messages on every channel and requires each
// Publish to succeed.
func (s *sequencer) round(t *testing.T, channels []string, n int) {
	t.Helper()
	ctx := testCtx(t, time.Minute)
	errs := make([]error, len(channels))
	var wg sync.WaitGroup
	for i, ch := range channels {
		first := s.next[ch] + 1
		wg.Go(func() {
			for seq := first; seq < first+uint64(n); seq++ {
				if err := s.pub.Publish(ctx, ch, []byte(strconv.FormatUint(seq, 10))); err != nil {
					errs[i] = fmt.Errorf("%s #%d: %w", ch, seq, err)
					return
				}
			}
		})
		s.next[ch] += uint64(n)
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
}

// requireExactly waits until every channel received its numbers 1..last
// and requires exactly those, once each, in order.
func (s *sequencer) requireExactly(t *testing.T, rec *recorder, channels []string) {
	t.Helper()
	require.True(t, waitFor(20*time.Second, func() bool {
		for _, ch := range channels {
			if uint64(rec.count(ch)) < s.next[ch] {
				return false
			}
		}
		return true
	}), "not every message was delivered")
	for _, ch := range channels {
		want := make([]uint64, s.next[ch])
		for i := range want {
			want[i] = uint64(i + 1)
		}
		require.Equal(t, want, rec.seqs(ch), "channel %s: every message once, in order", ch)
	}
}

// followedTo waits until sub carries partition p on its connection to
// addr, subscribed there.
func followedTo(t *testing.T, sub *Broker, p int, addr string) {
	t.Helper()
	require.True(t, waitFor(30*time.Second, func() bool {
		m := router{sub}.Carrier(p)
		w := sub.core.Paths[p].ActiveWire()
		return m != nil && m.Addr == addr && w != nil && w == m.Current()
	}), "the subscriber never carried partition %d on %s", p, addr)
}

// TestPublishFollowsSlotMove moves a partition's slot while a publish-only
// broker still routes it to the old master. Its next publishes meet MOVED
// there, are resent to the new master and arrive exactly once each, in order;
// the broker then routes the partition to the new master's connection and
// publishes there directly, leaving the old master alone.
func TestPublishFollowsSlotMove(t *testing.T) {
	c := redistest.StartCluster(t, 3, 0)
	ctx := testCtx(t, 2*time.Minute)
	rec := newRecorder()
	sub := newBroker(t, Config{Addrs: c.Seeds(), Options: shardcast.Options{Handler: rec.handle}})
	// The publisher learns of the move only from its publishes: its
	// periodic poll is due after the test.
	pub := newBroker(t, Config{Addrs: c.Seeds(), TopologyInterval: time.Hour})
	l := pub.Layout()
	masters, err := c.Masters(ctx)
	require.NoError(t, err)
	from, to := masters[0], masters[1]
	p := sortedCopy(pub.partitionsOf(from.Addr()))[0]
	channels := inPartitions(l, channelsPerPartition(l, 4, "route."), []int{p})
	require.Len(t, channels, 4)
	require.NoError(t, sub.Subscribe(ctx, channels...))
	seq := &sequencer{pub: pub, next: make(map[string]uint64)}

	seq.round(t, channels, 10)
	seq.requireExactly(t, rec, channels)
	require.True(t, routedTo(pub, p, from.Addr()))

	require.NoError(t, c.MoveSlot(ctx, l.Slot(p), to))
	// Publish only once the subscriber listens on the new master, so that
	// every message published from now on must arrive.
	followedTo(t, sub, p, to.Addr())
	require.True(t, routedTo(pub, p, from.Addr()), "the publisher's route is still stale")
	oldCalls, oldRejected := spublishStats(t, from)

	seq.round(t, channels, 20)
	seq.requireExactly(t, rec, channels)
	calls, rejected := spublishStats(t, from)
	assert.Greater(t, rejected, oldRejected, "publishes met the stale route: the old master redirected them")
	assert.Equal(t, oldCalls, calls, "no publish ran on the old master")
	require.True(t, waitFor(20*time.Second, func() bool { return routedTo(pub, p, to.Addr()) }),
		"the publisher never routed partition %d to %s", p, to.Addr())
	assert.True(t, routedTo(pub, p, to.Addr()), "the route points at the new master's connection")

	oldCalls, oldRejected = spublishStats(t, from)
	newCalls, _ := spublishStats(t, to)
	seq.round(t, channels, 20)
	seq.requireExactly(t, rec, channels)
	calls, rejected = spublishStats(t, from)
	assert.Equal(t, oldCalls, calls, "the old master sees no more publishes")
	assert.Equal(t, oldRejected, rejected, "nor redirects any")
	newNow, _ := spublishStats(t, to)
	assert.Equal(t, int64(20*len(channels)), newNow-newCalls, "every publish ran on the new master")
	assert.Equal(t, uint64(50*len(channels)), pub.Stats().Published)
}

// pollBound is the most CLUSTER SLOTS calls one broker may make in d when
// publish failures do not hurry its topology loop: a poll per
// RecoveryInterval (the spacing of publish-prompted polls) and per
// TopologyInterval, the polls in progress at either end, and one question to
// every master whose partitions changed hands (confirmMoves); plus, for a
// subscriber, the immediate polls it asks for after a lost connection.
// Nothing else asks: the broker has no cluster client refreshing a slot
// map of its own.
func pollBound(cfg Config, d time.Duration, masters int, subscriber bool) int {
	st, err := cfg.settings()
	if err != nil {
		panic(err)
	}
	loop := int(d/st.Conn.RecoveryInterval) + int(d/st.TopologyInterval) + 3 + masters
	if subscriber {
		loop += 2 * masters * st.Conn.SubscribeConns
	}
	return loop
}

// clusterSlotsCalls returns CLUSTER SLOTS calls per node address.
func clusterSlotsCalls(t *testing.T, nodes []*redistest.Server) map[string]int64 {
	t.Helper()
	out := make(map[string]int64, len(nodes))
	for _, s := range nodes {
		out[s.Addr()] = commandCalls(t, s, "cluster|slots")
	}
	return out
}

// startStorm publishes to channels from workers goroutines, each owning
// its channels (numbered per channel, as a feeder does), one publish per
// 5 ms per goroutine, each bounded by timeout. A short timeout makes a
// publish to an unreachable master fail fast, so each goroutine keeps
// failing, and prompting polls, for as long as the master is gone.
func startStorm(t *testing.T, pub *Broker, channels []string, workers int, timeout time.Duration) *feeder {
	t.Helper()
	f := &feeder{stop: make(chan struct{}), last: make(map[string]uint64), failed: make(map[string]map[uint64]bool), sentAt: make(map[string][]time.Time)}
	for w := range workers {
		var mine []string
		for i := w; i < len(channels); i += workers {
			mine = append(mine, channels[i])
		}
		if len(mine) > 0 {
			f.wg.Go(func() { storm(f, pub, mine, timeout) })
		}
	}
	t.Cleanup(f.halt)
	return f
}

// storm is one startStorm goroutine.
func storm(f *feeder, pub *Broker, channels []string, timeout time.Duration) {
	seq := make(map[string]uint64, len(channels))
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-f.stop:
			return
		case <-tick.C:
		}
		ch := channels[i%len(channels)]
		seq[ch]++
		f.publish(pub, ch, seq[ch], timeout)
	}
}

// TestPublishOnlyFailover kills a master while publish-only brokers publish
// to every partition from many goroutines. Their publishes to the dead
// master fail (or are resent to its successor) and each failure asks for a
// slot-map poll, yet the brokers poll no more than their RecoveryInterval
// spacing allows. Once the replica is promoted they route its partitions
// to it and their publishes succeed and arrive again; no message arrives
// twice.
func TestPublishOnlyFailover(t *testing.T) {
	const brokers, workers = 3, 12
	c := redistest.StartCluster(t, 3, 1)
	ctx := testCtx(t, 3*time.Minute)
	rec := newRecorder()
	events := &eventLog{}
	subCfg := Config{Addrs: c.Seeds(), Options: shardcast.Options{Handler: rec.handle, OnEvent: events.Add}}
	sub := newBroker(t, subCfg)
	t.Cleanup(func() {
		if t.Failed() { // what the subscriber reported, to tell a reported loss from a silent one
			for _, ev := range events.All() {
				t.Logf("event %v shard=%s partitions=%v since=%s until=%s err=%v", ev.Kind, ev.Shard, ev.Partitions,
					ev.Since.Format("15:04:05.000000"), ev.Until.Format("15:04:05.000000"), ev.Err)
			}
		}
	})
	pubCfg := Config{Addrs: c.Seeds()}
	pubs := make([]*Broker, brokers)
	for i := range pubs {
		pubs[i] = newBroker(t, pubCfg)
	}
	l := sub.Layout()
	channels := channelsPerPartition(l, 3, "pof.")
	// Each broker publishes its own third of every partition's channels.
	mine := make([][]string, brokers)
	for i, ch := range channels {
		mine[i%brokers] = append(mine[i%brokers], ch)
	}
	final := make([][]string, brokers)
	var all []string
	all = append(all, channels...)
	masters, err := c.Masters(ctx)
	require.NoError(t, err)
	victim := masters[0]
	parts := sortedCopy(sub.partitionsOf(victim.Addr()))
	require.NotEmpty(t, parts)
	for i := range final {
		final[i] = inPartitions(l, channelsPerPartition(l, 1, fmt.Sprintf("pof.final%d.", i)), parts)
		all = append(all, final[i]...)
	}
	require.NoError(t, sub.Subscribe(ctx, all...))
	var survivors []*redistest.Server
	for _, s := range c.Nodes() {
		if s != victim {
			survivors = append(survivors, s)
		}
	}

	storms := make([]*feeder, brokers)
	for i, pub := range pubs {
		storms[i] = startStorm(t, pub, mine[i], workers, 50*time.Millisecond)
	}
	rec.waitSilentSince(t, channels, time.Now(), 30*time.Second)

	// From the kill until every broker routes the partitions elsewhere, no
	// one but the brokers asks the survivors for CLUSTER SLOTS.
	before := clusterSlotsCalls(t, survivors)
	killedAt := time.Now()
	require.NoError(t, victim.Kill())
	everyone := append([]*Broker{sub}, pubs...)
	require.True(t, waitFor(30*time.Second, func() bool {
		for _, b := range everyone {
			for _, p := range parts {
				if owner := b.masterOf(p); owner == "" || owner == victim.Addr() {
					return false
				}
			}
		}
		return true
	}), "the brokers never routed the partitions of %s to its successor", victim.Addr())
	window := time.Since(killedAt)
	after := clusterSlotsCalls(t, survivors)
	var polls int64
	for addr, n := range after {
		polls += n - before[addr]
	}
	bound := pollBound(subCfg, window, len(masters), true)
	for range pubs {
		bound += pollBound(pubCfg, window, len(masters), false)
	}
	failures := 0
	for _, f := range storms {
		failures += f.failures()
	}
	t.Logf("FIGURE publish-only failover: %d CLUSTER SLOTS calls by %d brokers in the %v until every broker rerouted (bound %d); %d failed publishes prompted polls",
		polls, len(everyone), window.Round(time.Millisecond), bound, failures)
	assert.LessOrEqual(t, polls, int64(bound), "publish failures hurried the topology loops")
	assert.Positive(t, failures, "the storm met the dead master")

	promoted, err := c.WaitFailover(testCtx(t, 30*time.Second), victim)
	require.NoError(t, err)
	for _, p := range parts {
		followedTo(t, sub, p, promoted.Addr())
		for i, pub := range pubs {
			assert.True(t, routedTo(pub, p, promoted.Addr()), "broker %d routes partition %d to the promoted replica", i, p)
		}
	}
	for i, pub := range pubs {
		assert.False(t, pub.publishKnows(victim.Addr()), "broker %d retired its connection to the dead master", i)
	}

	// Every channel delivers again, then the storm stops: no message
	// arrived twice or out of order.
	rec.waitSilentSince(t, channels, time.Now(), 30*time.Second)
	for i, f := range storms {
		settle(t, rec, f, mine[i])
		rep := checkDelivery(t, rec, f, mine[i])
		t.Logf("FIGURE publish-only failover, broker %d: duplicates %d, reordered %d, failed publishes %d of which delivered late %d, acknowledged but not received %d",
			i, rep.duplicates, rep.reordered, f.failures(), rep.lateFailed, rep.missing)
		assert.Zero(t, rep.duplicates)
	}

	// Publishes to the promoted master's partitions succeed and arrive,
	// exactly once each.
	for i, pub := range pubs {
		seq := &sequencer{pub: pub, next: make(map[string]uint64)}
		seq.round(t, final[i], 10)
		seq.requireExactly(t, rec, final[i])
	}
}

// TestCloseWithRetiredPubs closes a publish-only broker while goroutines
// publish and while the connection to a master that lost all its
// partitions waits out its retirement (ReplyTimeout, far longer than the
// test): Close returns, closes that connection too, and leaves no
// goroutine behind.
func TestCloseWithRetiredPubs(t *testing.T) {
	c := redistest.StartCluster(t, 3, 0)
	ctx := testCtx(t, 2*time.Minute)
	masters, err := c.Masters(ctx)
	require.NoError(t, err)
	home, heir := masters[0], masters[1]
	leaks := goleak.IgnoreCurrent()

	pub, err := New(Config{Addrs: c.Seeds(), Partitions: 16, Conn: shardcast.ConnOptions{ReplyTimeout: time.Hour}})
	require.NoError(t, err)
	closed := false
	t.Cleanup(func() {
		if !closed {
			_ = pub.Close()
		}
	})
	l := pub.Layout()
	channels := channelsPerPartition(l, 1, "retire.")
	publishAll(t, pub, channels, "warm")
	retired := pubOf(pub, home.Addr())
	require.NotNil(t, retired)

	// Move every partition of home away while publishing: the MOVED
	// replies prompt polls, and home's connection is retired.
	moved := sortedCopy(pub.partitionsOf(home.Addr()))
	require.NotEmpty(t, moved)
	for _, p := range moved {
		require.NoError(t, c.MoveSlot(ctx, l.Slot(p), heir))
	}
	require.True(t, waitFor(30*time.Second, func() bool {
		publishAll(t, pub, inPartitions(l, channels, moved), "moved")
		return !pub.publishKnows(home.Addr())
	}), "the publisher never retired its connection to %s", home.Addr())
	require.NoError(t, retired.Ping(ctx), "the retired connection is not closed before ReplyTimeout")

	base := pub.Stats().Published
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := range 8 {
		wg.Go(func() {
			for i := w; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				err := pub.Publish(context.Background(), channels[i%len(channels)], []byte("x"))
				if errors.Is(err, shardcast.ErrClosed) {
					return
				}
			}
		})
	}
	require.True(t, waitFor(10*time.Second, func() bool { return pub.Stats().Published > base+100 }), "the publishers are running")
	done := make(chan error, 1)
	go func() { done <- pub.Close() }()
	select {
	case err := <-done:
		require.NoError(t, err)
		closed = true
	case <-time.After(time.Minute):
		// A second Close in the cleanup would wait for this one forever.
		closed = true
		close(stop)
		t.Fatal("Close did not return with publishes in flight and a retired connection pending")
	}
	close(stop)
	wg.Wait()
	assert.ErrorIs(t, retired.Ping(ctx), pubconn.ErrClosed, "Close closed the retired connection")
	assert.ErrorIs(t, pub.Publish(ctx, channels[0], []byte("x")), shardcast.ErrClosed)
	goleak.VerifyNone(t, leaks)
}

// TestPublishOnlyFollowsDemotion: after CLUSTER FAILOVER the demoted
// master still answers SPUBLISH (as a replica, relaying over the cluster
// bus), so no publish fails; a publish-only broker that polls its slot map
// only hourly must still notice, by the ROLE its publishing connection
// reports, and route to the new master.
func TestPublishOnlyFollowsDemotion(t *testing.T) {
	c := redistest.StartCluster(t, 3, 1)
	ctx := testCtx(t, time.Minute)
	pub := newBroker(t, Config{Addrs: c.Seeds(), TopologyInterval: time.Hour,
		Conn: shardcast.ConnOptions{HealthInterval: 50 * time.Millisecond}})
	l := pub.Layout()
	ch := "demoted"
	p := l.Partition(ch)
	require.NoError(t, pub.Publish(ctx, ch, []byte("before")))
	victim, err := c.MasterOfSlot(ctx, l.Slot(p))
	require.NoError(t, err)
	require.Equal(t, victim.Addr(), pub.masterOf(p))
	replicas, err := c.ReplicasOf(ctx, victim)
	require.NoError(t, err)
	require.NotEmpty(t, replicas)
	promoted := replicas[0]

	_, err = promoted.Do(ctx, "CLUSTER", "FAILOVER")
	require.NoError(t, err)
	require.True(t, waitFor(20*time.Second, func() bool {
		_ = pub.Publish(ctx, ch, []byte("during"))
		return pub.masterOf(p) == promoted.Addr()
	}), "the publish-only broker still routes partition %d to the demoted %s", p, victim.Addr())
	before, err := promoted.CommandStats(ctx)
	require.NoError(t, err)
	require.NoError(t, pub.Publish(ctx, ch, []byte("after")))
	after, err := promoted.CommandStats(ctx)
	require.NoError(t, err)
	assert.Greater(t, after["spublish"], before["spublish"], "the publish went to the new master")
}
