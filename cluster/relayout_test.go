package cluster

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/brokertest"
	"github.com/shardcast/shardcast/internal/crc16"
	"github.com/shardcast/shardcast/internal/layoutkey"
	"github.com/shardcast/shardcast/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// relayoutHeartbeat paces brokers and coordinator in the re-layout tests.
const relayoutHeartbeat = 50 * time.Millisecond

// TestRelayout runs the online re-layout cases on one cluster with
// replicas, one after the other, each under an Agreement.App of its own.
func TestRelayout(t *testing.T) {
	c := redistest.StartCluster(t, 3, 1)
	t.Run("Grow", func(t *testing.T) { testRelayoutGrow(t, c) })
	t.Run("PrefixAndShrink", func(t *testing.T) { testRelayoutPrefixAndShrink(t, c) })
	t.Run("Abort", func(t *testing.T) { testRelayoutAbort(t, c) })
	t.Run("BrokerDies", func(t *testing.T) { testRelayoutBrokerDies(t, c) })
	t.Run("BrokerJoins", func(t *testing.T) { testRelayoutBrokerJoins(t, c) })
	t.Run("Refused", func(t *testing.T) { testRelayoutRefused(t, c) })
}

// relayoutAgreement is the agreement of one test's application.
func relayoutAgreement(app string) shardcast.Agreement {
	return shardcast.Agreement{App: app, Heartbeat: relayoutHeartbeat}
}

// fleetStarter returns how the tests start a broker of app's fleet with
// layout (partitions, prefix).
func fleetStarter(t *testing.T, c *redistest.Cluster, app string, partitions int, prefix string) func(shardcast.Handler, func(shardcast.Event)) shardcast.Broker {
	return func(h shardcast.Handler, ev func(shardcast.Event)) shardcast.Broker {
		return newBroker(t, Config{Addrs: c.Seeds(), Partitions: partitions, Prefix: prefix,
			Options:   shardcast.Options{Handler: h, OnEvent: ev, QueueSize: 1 << 16},
			Agreement: relayoutAgreement(app)})
	}
}

func clusterRelayoutConfig(c *redistest.Cluster, app string, partitions int) RelayoutConfig {
	return RelayoutConfig{Addrs: c.Seeds(), Agreement: relayoutAgreement(app), Partitions: partitions}
}

// logPhases logs the coordinator's phases and returns their names.
func logPhases(t *testing.T, rep shardcast.RelayoutReport) []string {
	var names []string
	for _, p := range rep.Phases {
		t.Logf("phase %-7s %8v  %d brokers  %d barriers", p.Phase, p.Took.Round(time.Millisecond), p.Brokers, p.Barriers)
		names = append(names, p.Phase)
	}
	return names
}

// shardNumSub returns how many subscribers the master of key's slot
// counts for key.
func shardNumSub(t *testing.T, c *redistest.Cluster, key string) int64 {
	t.Helper()
	ctx := testCtx(t, 10*time.Second)
	owner, err := c.MasterOfSlot(ctx, crc16.Slot(key))
	require.NoError(t, err)
	v, err := owner.Do(ctx, "PUBSUB", "SHARDNUMSUB", key)
	require.NoError(t, err)
	list, _ := v.([]any)
	require.Len(t, list, 2)
	n, _ := list[1].(int64)
	return n
}

// checkSettled checks that every broker moved to layout to and wants
// each channel once, and that a sample of channels is subscribed under
// its new wire key by every broker and no longer under from's.
func checkSettled(t *testing.T, c *redistest.Cluster, f *brokertest.RelayoutFleet, channels []string, from, to *shardcast.Layout) {
	t.Helper()
	for i, x := range f.Brokers {
		b := x.(*Broker)
		assert.Equal(t, to.Fingerprint(), b.Fingerprint(), "broker %d", i)
		assert.Equal(t, to.Fingerprint(), b.Layout().Fingerprint(), "broker %d", i)
		assert.Len(t, b.PartitionStats(), to.Partitions())
		require.True(t, waitFor(10*time.Second, func() bool { return b.Stats().Channels == len(channels) }),
			"broker %d wants %d channels, not %d: the old subscriptions stay", i, b.Stats().Channels, len(channels))
		assert.Equal(t, []string{"prepare", "switch", "drain", "finish"}, f.Events[i].RelayoutPhases(), "broker %d", i)
		assert.Empty(t, f.Events[i].Of(shardcast.EventInterrupted), "broker %d", i)
	}
	moved := 0
	for _, ch := range brokertest.Sample(channels, 20) {
		assert.EqualValues(t, len(f.Brokers), shardNumSub(t, c, to.Key(ch)), "%s under its new key", ch)
		if from.Key(ch) != to.Key(ch) {
			moved++
			assert.Zero(t, shardNumSub(t, c, from.Key(ch)), "%s left its old key", ch)
		}
	}
	t.Logf("%d of 20 sampled channels changed their wire key", moved)
}

// testRelayoutGrow: four brokers, each subscribing 300 channels and
// publishing to all of them without pause, move from 128 to 1024
// partitions: every subscriber gets every message once and in order per
// publisher, the channels end up under their new keys only, and every
// broker reports the four phases.
func testRelayoutGrow(t *testing.T, c *redistest.Cluster) {
	const app = "grow:"
	channels := numbered("grow.", 300)
	f := brokertest.NewRelayoutFleet(t, 4, channels, brokertest.FleetOptions{}, fleetStarter(t, c, app, 128, ""))
	f.WaitPublished(2000)
	ctx := testCtx(t, 30*time.Second)
	before := f.Published()
	rep, err := Relayout(ctx, clusterRelayoutConfig(c, app, 1024))
	require.NoError(t, err)
	during := f.Published() - before
	f.WaitPublished(2000)
	counts := f.Finish([]int{0, 1, 2, 3}, 20*time.Second)
	assert.Equal(t, []string{"prepare", "switch", "drain", "finish"}, logPhases(t, rep))
	t.Logf("%d messages published during the re-layout", during)
	brokertest.CheckCounts(t, counts, false)
	from, to := layoutOf(t, 128, ""), layoutOf(t, 1024, "")
	assert.Equal(t, from.Fingerprint(), rep.From.Fingerprint)
	assert.Equal(t, to.Fingerprint(), rep.To.Fingerprint)
	checkSettled(t, c, f, channels, from, to)
}

// testRelayoutPrefixAndShrink: a re-layout that changes the prefix (so
// every channel moves, to the broker's second bank of paths) and shrinks
// from 1024 to 256 partitions loses, duplicates and reorders nothing; a
// second one back to the first prefix (and bank) does the same.
func testRelayoutPrefixAndShrink(t *testing.T, c *redistest.Cluster) {
	const app = "prefix:"
	channels := numbered("prefix.", 200)
	f := brokertest.NewRelayoutFleet(t, 3, channels, brokertest.FleetOptions{}, fleetStarter(t, c, app, 1024, "a:"))
	f.WaitPublished(1500)
	ctx := testCtx(t, 30*time.Second)
	cfg := clusterRelayoutConfig(c, app, 256)
	prefix := "b:"
	cfg.Prefix = &prefix
	rep, err := Relayout(ctx, cfg)
	require.NoError(t, err)
	logPhases(t, rep)
	f.WaitPublished(1500)
	back := clusterRelayoutConfig(c, app, 0)
	prefix2 := "a:"
	back.Prefix = &prefix2
	rep, err = Relayout(ctx, back)
	require.NoError(t, err)
	logPhases(t, rep)
	f.WaitPublished(1500)
	brokertest.CheckCounts(t, f.Finish([]int{0, 1, 2}, 20*time.Second), false)
	for i, x := range f.Brokers {
		assert.Equal(t, layoutOf(t, 256, "a:").Fingerprint(), x.(*Broker).Fingerprint(), "broker %d", i)
		assert.Len(t, f.Events[i].Of(shardcast.EventRelayout), 8, "broker %d: two re-layouts of four phases", i)
	}
	for _, ch := range brokertest.Sample(channels, 10) {
		assert.EqualValues(t, 3, shardNumSub(t, c, layoutOf(t, 256, "a:").Key(ch)))
		assert.Zero(t, shardNumSub(t, c, layoutOf(t, 256, "b:").Key(ch)))
		assert.Zero(t, shardNumSub(t, c, layoutOf(t, 1024, "a:").Key(ch))*boolInt(layoutOf(t, 1024, "a:").Key(ch) != layoutOf(t, 256, "a:").Key(ch)))
	}
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// testRelayoutAbort: a re-layout whose coordinator's ctx ends after the
// switch aborts: every broker returns to the old layout and drops what it
// subscribed under the new one, the record keeps the old layout, and no
// message is lost or duplicated (an abort after the switch may reorder
// the moment of the abort; the figures say how much).
func testRelayoutAbort(t *testing.T, c *redistest.Cluster) {
	const app = "abort:"
	channels := numbered("abort.", 200)
	f := brokertest.NewRelayoutFleet(t, 3, channels, brokertest.FleetOptions{}, fleetStarter(t, c, app, 128, ""))
	f.WaitPublished(1000)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := clusterRelayoutConfig(c, app, 1024)
	cfg.OnPhase = func(p shardcast.RelayoutPhaseReport) {
		if p.Phase == shardcast.PhaseSwitch {
			cancel()
		}
	}
	rep, err := Relayout(ctx, cfg)
	require.ErrorIs(t, err, shardcast.ErrRelayoutAborted)
	assert.True(t, rep.Aborted)
	t.Logf("phases: %v", logPhases(t, rep))
	f.WaitPublished(1000)
	brokertest.CheckCounts(t, f.Finish([]int{0, 1, 2}, 20*time.Second), true)

	l128 := layoutOf(t, 128, "")
	a := relayoutAgreement(app)
	owner, err := c.MasterOfSlot(testCtx(t, 10*time.Second), crc16.Slot(a.RecordKey()))
	require.NoError(t, err)
	fp, err := owner.Do(testCtx(t, 10*time.Second), "HGET", a.RecordKey(), "fingerprint")
	require.NoError(t, err)
	assert.Equal(t, l128.Fingerprint(), fp, "the record keeps the old layout")
	n, err := owner.Do(testCtx(t, 10*time.Second), "EXISTS", layoutkey.Transition(a))
	require.NoError(t, err)
	assert.EqualValues(t, 0, n, "the transition is gone")
	for i, x := range f.Brokers {
		b := x.(*Broker)
		assert.Equal(t, l128.Fingerprint(), b.Fingerprint())
		assert.Contains(t, f.Events[i].RelayoutPhases(), shardcast.PhaseAbort, "broker %d", i)
		require.True(t, waitFor(10*time.Second, func() bool { return b.Stats().Channels == len(channels) }),
			"broker %d still wants %d channels", i, b.Stats().Channels)
	}
	l1024 := layoutOf(t, 1024, "")
	for _, ch := range brokertest.Sample(channels, 10) {
		assert.EqualValues(t, 3, shardNumSub(t, c, l128.Key(ch)))
		if l1024.Key(ch) != l128.Key(ch) {
			assert.Zero(t, shardNumSub(t, c, l1024.Key(ch)), "%s: the new key was dropped", ch)
		}
	}
}

// testRelayoutBrokerDies: a broker that dies mid-way (closed without
// leaving the registry, so its registration expires) is not waited for:
// the re-layout completes, and the others lose nothing.
func testRelayoutBrokerDies(t *testing.T, c *redistest.Cluster) {
	const app = "dies:"
	channels := numbered("dies.", 200)
	f := brokertest.NewRelayoutFleet(t, 4, channels, brokertest.FleetOptions{}, fleetStarter(t, c, app, 128, ""))
	f.WaitPublished(1000)
	ctx := testCtx(t, 30*time.Second)
	cfg := clusterRelayoutConfig(c, app, 512)
	cfg.OnPhase = func(p shardcast.RelayoutPhaseReport) {
		if p.Phase == shardcast.PhasePrepare {
			dead := f.Brokers[3].(*Broker)
			f.Dead(3)
			dead.member.Abandon() // a crash: no leave
			require.NoError(t, dead.Close())
		}
	}
	rep, err := Relayout(ctx, cfg)
	require.NoError(t, err)
	logPhases(t, rep)
	assert.Equal(t, 3, rep.Phases[len(rep.Phases)-1].Brokers, "the dead broker was dropped")
	f.WaitPublished(1000)
	brokertest.CheckCounts(t, f.Finish([]int{0, 1, 2}, 20*time.Second), false)
}

// testRelayoutBrokerJoins: a broker started with the old layout in the
// middle of a re-layout follows it from the phase it finds, and one
// started with the new layout during it is taken too; both get every
// message from their first one, once and in order.
func testRelayoutBrokerJoins(t *testing.T, c *redistest.Cluster) {
	const app = "joins:"
	channels := numbered("joins.", 200)
	f := brokertest.NewRelayoutFleet(t, 3, channels, brokertest.FleetOptions{}, fleetStarter(t, c, app, 128, ""))
	f.WaitPublished(1000)
	ctx := testCtx(t, 30*time.Second)
	cfg := clusterRelayoutConfig(c, app, 1024)
	cfg.OnPhase = func(p shardcast.RelayoutPhaseReport) {
		switch p.Phase {
		case shardcast.PhasePrepare:
			f.Add(fleetStarter(t, c, app, 128, ""))
		case shardcast.PhaseSwitch:
			f.Add(fleetStarter(t, c, app, 1024, ""))
		}
	}
	rep, err := Relayout(ctx, cfg)
	require.NoError(t, err)
	logPhases(t, rep)
	assert.Equal(t, 5, rep.Phases[len(rep.Phases)-1].Brokers)
	f.WaitPublished(1000)
	brokertest.CheckCounts(t, f.Finish([]int{0, 1, 2, 3, 4}, 20*time.Second), false)
	for _, x := range f.Brokers {
		assert.Equal(t, layoutOf(t, 1024, "").Fingerprint(), x.(*Broker).Fingerprint())
	}
}

// testRelayoutRefused: a re-layout without a record, to the recorded
// layout, to an unsupported partition count, with no seed that answers,
// or while another is under way fails with a clear error and changes
// nothing.
func testRelayoutRefused(t *testing.T, c *redistest.Cluster) {
	const app = "refused:"
	ctx := testCtx(t, 30*time.Second)
	_, err := Relayout(ctx, clusterRelayoutConfig(c, app, 1024))
	assert.ErrorIs(t, err, shardcast.ErrNoLayoutRecord)

	newBroker(t, Config{Addrs: c.Seeds(), Agreement: relayoutAgreement(app)})
	_, err = Relayout(ctx, clusterRelayoutConfig(c, app, 128))
	assert.ErrorIs(t, err, shardcast.ErrSameLayout)
	empty := ""
	cfg := clusterRelayoutConfig(c, app, 0)
	cfg.Prefix = &empty
	_, err = Relayout(ctx, cfg)
	assert.ErrorIs(t, err, shardcast.ErrSameLayout)
	for _, n := range []int{100, 8192, -1} {
		_, err = Relayout(ctx, clusterRelayoutConfig(c, app, n))
		assert.ErrorIs(t, err, shardcast.ErrInvalidConfig, "%d partitions", n)
	}
	cfg = clusterRelayoutConfig(c, app, 1024)
	cfg.Addrs = []string{"127.0.0.1:1"}
	cfg.Conn.DialTimeout = 200 * time.Millisecond
	_, err = Relayout(ctx, cfg)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "127.0.0.1:1")
	a := relayoutAgreement(app)
	owner, err := c.MasterOfSlot(ctx, crc16.Slot(a.RecordKey()))
	require.NoError(t, err)
	n, err := owner.Do(ctx, "EXISTS", layoutkey.Transition(a))
	require.NoError(t, err)
	assert.EqualValues(t, 0, n, "nothing began")

	var other error
	cfg = clusterRelayoutConfig(c, app, 1024)
	cfg.OnPhase = func(p shardcast.RelayoutPhaseReport) {
		if p.Phase == shardcast.PhasePrepare {
			_, other = Relayout(ctx, clusterRelayoutConfig(c, app, 256))
		}
	}
	_, err = Relayout(ctx, cfg)
	require.NoError(t, err)
	assert.ErrorIs(t, other, shardcast.ErrRelayoutInProgress)
	assert.Contains(t, other.Error(), "phase switch")
	assert.True(t, strings.Contains(other.Error(), "1024 partitions"), other.Error())
}

// TestRelayoutHeavy (with SHARDCAST_HEAVY set): 20 brokers each
// subscribing 100,000 channels, each publishing to its twentieth of them
// without pause, move from 128 to 1024 partitions: 0 lost, 0 duplicates,
// 0 reordered.
func TestRelayoutHeavy(t *testing.T) {
	if os.Getenv(brokertest.HeavyEnv) == "" {
		t.Skipf("set %s to run it", brokertest.HeavyEnv)
	}
	c := redistest.StartCluster(t, 3, 1)
	const app = "heavy:"
	// A heartbeat that a loaded host keeps: a live broker whose
	// registration expires is not waited for (run with the tests' 50 ms,
	// most of the fleet expired at some phase, and lost messages).
	a := shardcast.Agreement{App: app, Heartbeat: time.Second}
	channels := numbered("heavy.", 100_000)
	f := brokertest.NewRelayoutFleet(t, 20, channels, brokertest.FleetOptions{Split: true, Pause: time.Millisecond},
		func(h shardcast.Handler, ev func(shardcast.Event)) shardcast.Broker {
			return newBroker(t, Config{Addrs: c.Seeds(), Options: shardcast.Options{Handler: h, OnEvent: ev, QueueSize: 1 << 16}, Agreement: a})
		})
	f.WaitPublished(50_000)
	ctx := testCtx(t, 5*time.Minute)
	before := f.Published()
	start := time.Now()
	rep, err := Relayout(ctx, RelayoutConfig{Addrs: c.Seeds(), Agreement: a, Partitions: 1024})
	require.NoError(t, err)
	t.Logf("re-layout took %v; %d messages published during it", time.Since(start).Round(time.Millisecond), f.Published()-before)
	assert.Equal(t, []string{"prepare", "switch", "drain", "finish"}, logPhases(t, rep))
	f.WaitPublished(50_000)
	live := make([]int, 20)
	for i := range live {
		live[i] = i
	}
	brokertest.CheckCounts(t, f.Finish(live, time.Minute), false)
	for i, x := range f.Brokers {
		assert.Equal(t, layoutOf(t, 1024, "").Fingerprint(), x.(*Broker).Fingerprint(), "broker %d", i)
	}
}

// TestLateBarrierNotDelivered: a barrier of a re-layout from prefix "x:"
// that arrives after the broker moved to prefix "" reads as channel
// "x:" + barrier name there; it never reaches the Handler, nor does one
// under the broker's own prefix, while the message after them does.
func TestLateBarrierNotDelivered(t *testing.T) {
	c := redistest.StartCluster(t, 3, 0)
	rec := newRecorder()
	b := newBroker(t, Config{Addrs: c.Seeds(), Options: shardcast.Options{Handler: rec.handle}})
	ctx := testCtx(t, 30*time.Second)
	barrier := layoutkey.Barrier(shardcast.Agreement{}, "20261201T000000Z-0123456789ab")
	channels := []string{barrier, "x:" + barrier, "after"}
	require.NoError(t, b.Subscribe(ctx, channels...))
	for _, ch := range channels[:2] {
		owner, err := c.MasterOfSlot(ctx, crc16.Slot(b.WireChannel(ch)))
		require.NoError(t, err)
		_, err = owner.Do(ctx, "SPUBLISH", b.WireChannel(ch), "20261201T000000Z-0123456789ab")
		require.NoError(t, err)
	}
	require.NoError(t, b.Publish(ctx, "after", []byte("x")))
	require.True(t, waitFor(10*time.Second, func() bool { return rec.count("after") == 1 }), "the message after the barriers")
	for _, ch := range channels[:2] {
		assert.Zero(t, rec.count(ch), "%s reached the Handler", ch)
	}
}
