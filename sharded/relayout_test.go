package sharded

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/brokertest"
	"github.com/shardcast/shardcast/internal/layoutkey"
	"github.com/shardcast/shardcast/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// relayoutHeartbeat paces brokers and coordinator in the re-layout tests.
const relayoutHeartbeat = 50 * time.Millisecond

// relayoutFleet is brokertest's RelayoutFleet of sharded brokers, with
// the brokers kept as *Broker too.
type relayoutFleet struct {
	*brokertest.RelayoutFleet
	t       *testing.T
	brokers []*Broker // the fleet's Brokers, in start order
}

// newRelayoutFleet starts n brokers over addrs, each subscribing every
// channel and publishing to all of them.
func newRelayoutFleet(t *testing.T, n int, addrs []string, channels []string) *relayoutFleet {
	f := &relayoutFleet{t: t}
	f.RelayoutFleet = brokertest.NewRelayoutFleet(t, n, channels, brokertest.FleetOptions{}, f.starter(addrs))
	return f
}

// twoToThree sets up a move from two instances to three: three servers,
// ab (the addresses of the first two) and abc (all three), n channels
// named prefix and a number, and a fleet of brokers on ab that subscribe
// every channel and publish to all of them.
func twoToThree(t *testing.T, brokers int, prefix string, n int) (servers []*redistest.Server, ab, abc, channels []string, f *relayoutFleet) {
	servers = startServers(t, 3)
	ab, abc = addrs(servers[0], servers[1]), addrs(servers...)
	channels = channelNames(prefix, n)
	return servers, ab, abc, channels, newRelayoutFleet(t, brokers, ab, channels)
}

// starter returns the fleet's way to start a broker over addrs.
func (f *relayoutFleet) starter(addrs []string) func(shardcast.Handler, func(shardcast.Event)) shardcast.Broker {
	return f.starterWith(addrs, false)
}

// starterWith is starter, with Agreement.Follow set to follow.
func (f *relayoutFleet) starterWith(addrs []string, follow bool) func(shardcast.Handler, func(shardcast.Event)) shardcast.Broker {
	return func(h shardcast.Handler, on func(shardcast.Event)) shardcast.Broker {
		b := newBroker(f.t, Config{Addrs: addrs,
			Options:   shardcast.Options{Handler: h, OnEvent: on, QueueSize: 1 << 16},
			Agreement: shardcast.Agreement{Heartbeat: relayoutHeartbeat, Follow: follow}})
		f.brokers = append(f.brokers, b)
		return b
	}
}

// add starts one more broker over addrs (subscribing every channel) and
// its publisher.
func (f *relayoutFleet) add(addrs []string) *Broker {
	f.Add(f.starter(addrs))
	return f.brokers[len(f.brokers)-1]
}

func relayoutConfig(control string, to []string) RelayoutConfig {
	return RelayoutConfig{ControlAddr: control, To: to, Agreement: shardcast.Agreement{Heartbeat: relayoutHeartbeat}}
}

// checkOn checks that every broker of the fleet is on the instance list
// addrs.
func (f *relayoutFleet) checkOn(addrs []string) {
	f.t.Helper()
	fp, err := Fingerprint(addrs)
	require.NoError(f.t, err)
	for i, b := range f.brokers {
		assert.Equal(f.t, fp, b.Fingerprint(), "broker %d", i)
	}
}

// TestRelayoutTwoToThree: four brokers, each subscribing 200 channels and
// publishing to all of them without pause, move from 2 to 3 instances:
// every subscriber gets every message once and in order per publisher,
// the moving channels end up on the new instance only, and every broker
// reports the four phases.
func TestRelayoutTwoToThree(t *testing.T) {
	servers, ab, abc, channels, f := twoToThree(t, 4, "relayout-", 200)
	f.WaitPublished(2000)

	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	var phases []PhaseReport
	cfg := relayoutConfig(ab[0], abc)
	cfg.OnPhase = func(p PhaseReport) { phases = append(phases, p) }
	before := f.Published()
	rep, err := Relayout(ctx, cfg)
	require.NoError(t, err)
	during := f.Published() - before
	f.WaitPublished(2000)
	counts := f.Finish([]int{0, 1, 2, 3}, waitTimeout)

	for _, p := range rep.Phases {
		t.Logf("phase %-7s %8v  %d brokers  %d barriers", p.Phase, p.Took.Round(time.Millisecond), p.Brokers, p.Barriers)
	}
	assert.Equal(t, []string{"prepare", "switch", "drain", "finish"}, phaseNames(rep.Phases))
	assert.Len(t, phases, 4)
	t.Logf("%d messages published during the re-layout", during)
	brokertest.CheckCounts(t, counts, false)
	newFP, err := Fingerprint(abc)
	require.NoError(t, err)
	fields, members := recordOn(t, servers[0], defaultAgreement)
	assert.Equal(t, newFP, fields["fingerprint"])
	assert.Len(t, members, 4)
	moved := 0
	for i, b := range f.brokers {
		assert.Equal(t, newFP, b.Fingerprint(), "broker %d", i)
		assert.Equal(t, abc, b.Instances())
		assert.Equal(t, []string{"prepare", "switch", "drain", "finish"}, f.Events[i].RelayoutPhases(), "broker %d", i)
		assert.Empty(t, f.Events[i].Of(shardcast.EventInterrupted), "broker %d", i)
	}
	for _, ch := range channels {
		if f.brokers[0].Shard(ch) == 2 {
			moved++
			assert.EqualValues(t, 4, numsub(t, servers[2], ch), "%s on the new instance", ch)
			assert.Zero(t, numsub(t, servers[0], ch)+numsub(t, servers[1], ch), "%s left the old instances", ch)
		}
	}
	t.Logf("%d of %d channels moved", moved, len(channels))
	assert.NotZero(t, moved)
	for _, b := range f.brokers {
		assert.Equal(t, len(channels), b.Stats().Channels, "no channel is wanted twice after the finish")
	}
}

func phaseNames(ps []PhaseReport) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Phase)
	}
	return out
}

// TestRelayoutAbort: a re-layout whose coordinator's ctx ends after the
// switch aborts: every broker returns to the old list and drops what it
// subscribed on the new instance, the record keeps the old list, and no
// message is lost or duplicated (an abort after the switch may reorder
// the moment of the abort; the figures say how much).
func TestRelayoutAbort(t *testing.T) {
	servers, ab, abc, channels, f := twoToThree(t, 3, "abort-", 100)
	f.WaitPublished(1000)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	cfg := relayoutConfig(ab[0], abc)
	cfg.OnPhase = func(p PhaseReport) {
		if p.Phase == shardcast.PhaseSwitch {
			cancel()
		}
	}
	rep, err := Relayout(ctx, cfg)
	require.ErrorIs(t, err, shardcast.ErrRelayoutAborted)
	assert.True(t, rep.Aborted)
	t.Logf("phases: %v", phaseNames(rep.Phases))
	f.WaitPublished(1000)
	brokertest.CheckCounts(t, f.Finish([]int{0, 1, 2}, waitTimeout), true)

	oldFP, err := Fingerprint(ab)
	require.NoError(t, err)
	fields, _ := recordOn(t, servers[0], defaultAgreement)
	assert.Equal(t, oldFP, fields["fingerprint"], "the record keeps the old list")
	n, err := servers[0].Do(context.Background(), "EXISTS", layoutkey.Transition(defaultAgreement))
	require.NoError(t, err)
	assert.EqualValues(t, 0, n, "the transition is gone")
	for i, b := range f.brokers {
		assert.Equal(t, oldFP, b.Fingerprint())
		assert.Contains(t, f.Events[i].RelayoutPhases(), shardcast.PhaseAbort, "broker %d", i)
	}
	waitFor(t, "the new instance's subscriptions to be dropped", func() bool { return pubsubChannels(t, servers[2]) == 0 })
	for _, b := range f.brokers {
		waitFor(t, "one subscription per channel", func() bool { return b.Stats().Channels == len(channels) })
	}
}

// TestAbortRelayoutEndedBetweenPolls: an operator's AbortRelayout that
// takes the abort to its end before the coordinator polls again leaves no
// transition behind, so the coordinator finds it gone and cannot tell it
// from a control instance that lost its data (TestCoordinatorTransitionVanishes):
// it reports ErrRelayoutVanished, or ErrRelayoutAborted when it polled
// first. Either way the fleet stays on the old list.
func TestAbortRelayoutEndedBetweenPolls(t *testing.T) {
	_, ab, abc, _, f := twoToThree(t, 2, "opabort2-", 100)
	f.WaitPublished(500)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	var abortErr error
	cfg := relayoutConfig(ab[0], abc)
	cfg.OnPhase = func(p PhaseReport) {
		if p.Phase == shardcast.PhasePrepare {
			// On the coordinator's goroutine: it polls again only after.
			abortErr = AbortRelayout(ctx, relayoutConfig(ab[0], nil))
		}
	}
	_, err := Relayout(ctx, cfg)
	require.NoError(t, abortErr)
	require.True(t, errors.Is(err, shardcast.ErrRelayoutAborted) || errors.Is(err, shardcast.ErrRelayoutVanished), "%v", err)
	f.WaitPublished(500)
	brokertest.CheckCounts(t, f.Finish([]int{0, 1}, waitTimeout), true)
	f.checkOn(ab)
}

// TestAbortRelayout: AbortRelayout, run by another process's operator
// while a re-layout is under way, returns the fleet to the old list (the
// re-layout's own coordinator then reports it aborted), and with none
// under way it fails with ErrNoRelayout.
func TestAbortRelayout(t *testing.T) {
	_, ab, abc, _, f := twoToThree(t, 2, "opabort-", 100)
	f.WaitPublished(500)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	err := AbortRelayout(ctx, relayoutConfig(ab[0], nil))
	require.ErrorIs(t, err, shardcast.ErrNoRelayout)

	aborted := make(chan error, 1)
	cfg := relayoutConfig(ab[0], abc)
	cfg.OnPhase = func(p PhaseReport) {
		if p.Phase == shardcast.PhasePrepare {
			go func() { aborted <- AbortRelayout(ctx, relayoutConfig(ab[0], nil)) }()
		}
	}
	rep, err := Relayout(ctx, cfg)
	// Vanished when the operator's abort ended before the coordinator
	// polled again (see TestAbortRelayoutEndedBetweenPolls).
	require.True(t, errors.Is(err, shardcast.ErrRelayoutAborted) || errors.Is(err, shardcast.ErrRelayoutVanished), "%v", err)
	require.NoError(t, <-aborted)
	t.Logf("phases: %v", phaseNames(rep.Phases))
	f.WaitPublished(500)
	brokertest.CheckCounts(t, f.Finish([]int{0, 1}, waitTimeout), true)
	f.checkOn(ab)
	require.ErrorIs(t, AbortRelayout(ctx, relayoutConfig(ab[0], nil)), shardcast.ErrNoRelayout)
}

// TestRelayoutBrokerDies: a broker that dies mid-way (closed without
// leaving the registry, so its registration expires) is not waited for:
// the re-layout completes, and the others lose nothing.
func TestRelayoutBrokerDies(t *testing.T) {
	_, ab, abc, _, f := twoToThree(t, 4, "dies-", 100)
	f.WaitPublished(1000)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	cfg := relayoutConfig(ab[0], abc)
	cfg.OnPhase = func(p PhaseReport) {
		if p.Phase == shardcast.PhasePrepare {
			dead := f.brokers[3]
			f.Dead(3)
			dead.member.Abandon() // a crash: no leave
			require.NoError(t, dead.Close())
		}
	}
	rep, err := Relayout(ctx, cfg)
	require.NoError(t, err)
	for _, p := range rep.Phases {
		t.Logf("phase %-7s %8v  %d brokers", p.Phase, p.Took.Round(time.Millisecond), p.Brokers)
	}
	assert.Equal(t, 3, rep.Phases[len(rep.Phases)-1].Brokers, "the dead broker was dropped")
	f.WaitPublished(1000)
	brokertest.CheckCounts(t, f.Finish([]int{0, 1, 2}, waitTimeout), false)
}

// TestRelayoutBrokerJoins: a broker started with the old list in the
// middle of a re-layout follows it from the phase it finds, and, like
// the others, gets every message from its first one, once and in order.
// One started with the new list during it is taken too, and so is one
// configured with neither list but Agreement.Follow set: it adopts the
// recorded list and then follows the re-layout like the first. One
// started with the new list in the finish phase, when the record already
// holds it, has nothing to follow and acknowledges the finish, which
// would otherwise wait for it until the coordinator's ctx ends.
func TestRelayoutBrokerJoins(t *testing.T) {
	_, ab, abc, _, f := twoToThree(t, 3, "joins-", 100)
	f.WaitPublished(1000)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	cfg := relayoutConfig(ab[0], abc)
	cfg.OnPhase = func(p PhaseReport) {
		switch p.Phase {
		case shardcast.PhasePrepare:
			f.add(ab)
		case shardcast.PhaseSwitch:
			f.add(abc)
			f.Add(f.starterWith(ab[:1], true))
		case shardcast.PhaseDrain: // reported once the transition is in finish
			f.add(abc)
		}
	}
	rep, err := Relayout(ctx, cfg)
	require.NoError(t, err)
	for _, p := range rep.Phases {
		t.Logf("phase %-7s %8v  %d brokers", p.Phase, p.Took.Round(time.Millisecond), p.Brokers)
	}
	assert.Equal(t, 7, rep.Phases[len(rep.Phases)-1].Brokers)
	f.WaitPublished(1000)
	brokertest.CheckCounts(t, f.Finish([]int{0, 1, 2, 3, 4, 5, 6}, waitTimeout), false)
	f.checkOn(abc)
}

// TestRelayoutFinishReappears: a failover of the control instance just
// after a re-layout ended can lose the end, and the transition comes
// back in phase finish, its acknowledgements lost with it. The brokers,
// all on its layout already, acknowledge it again, and running the same
// re-layout again resumes it and ends it.
func TestRelayoutFinishReappears(t *testing.T) {
	servers, ab, abc, _, f := twoToThree(t, 2, "reappears-", 50)
	f.WaitPublished(200)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	var finish []string // the transition in its finish phase, field/value pairs
	cfg := relayoutConfig(ab[0], abc)
	cfg.OnPhase = func(p PhaseReport) {
		if p.Phase != shardcast.PhaseDrain {
			return // the drain is reported once the transition is in finish, until this returns
		}
		v, err := servers[0].Do(ctx, "HGETALL", layoutkey.Transition(defaultAgreement))
		require.NoError(t, err)
		fields, ok := v.([]any)
		require.True(t, ok, "HGETALL reply %T", v)
		for _, x := range fields {
			s, ok := x.(string)
			require.True(t, ok, "HGETALL field %T", x)
			finish = append(finish, s)
		}
	}
	_, err := Relayout(ctx, cfg)
	require.NoError(t, err)
	require.NotEmpty(t, finish)
	require.Contains(t, finish, shardcast.PhaseFinish)

	// The brokers see the end (a follower that had not would still hold
	// the transition's id, and take the finish back as its own).
	time.Sleep(5 * relayoutHeartbeat)
	// The end lost: the transition is back, without acknowledgements.
	_, err = servers[0].Do(ctx, append([]string{"HSET", layoutkey.Transition(defaultAgreement)}, finish...)...)
	require.NoError(t, err)
	require.ErrorContains(t, AbortRelayout(ctx, relayoutConfig(ab[0], nil)), "finishing", "a finish cannot be aborted")
	cfg.OnPhase = nil
	rep, err := Relayout(ctx, cfg)
	require.NoError(t, err, "the same re-layout resumes the finish and ends it")
	require.Len(t, rep.Phases, 1)
	assert.Equal(t, shardcast.PhaseFinish, rep.Phases[0].Phase)
	assert.Equal(t, 2, rep.Phases[0].Brokers)
	n, err := servers[0].Do(ctx, "EXISTS", layoutkey.Transition(defaultAgreement))
	require.NoError(t, err)
	assert.EqualValues(t, 0, n, "the transition is gone")
	f.WaitPublished(200)
	brokertest.CheckCounts(t, f.Finish([]int{0, 1}, waitTimeout), false)
	f.checkOn(abc)
}

// TestRelayoutRefused: a re-layout to the recorded list, to an
// unreachable instance, without a record, or while another is under way
// fails with a clear error and changes nothing.
func TestRelayoutRefused(t *testing.T) {
	servers := startServers(t, 4)
	ab, abc := addrs(servers[0], servers[1]), addrs(servers[0], servers[1], servers[2])
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()

	_, err := Relayout(ctx, relayoutConfig(ab[0], abc))
	assert.ErrorIs(t, err, shardcast.ErrNoLayoutRecord)

	newBroker(t, Config{Addrs: ab, Agreement: shardcast.Agreement{Heartbeat: relayoutHeartbeat}})
	_, err = Relayout(ctx, relayoutConfig(ab[0], ab))
	assert.ErrorIs(t, err, shardcast.ErrSameLayout)
	_, err = Relayout(ctx, relayoutConfig(ab[0], nil))
	assert.ErrorIs(t, err, shardcast.ErrInvalidConfig)
	_, err = Relayout(ctx, relayoutConfig(ab[0], append(abc, "redis://"+ab[1])))
	assert.ErrorIs(t, err, shardcast.ErrInvalidConfig, "an instance listed twice")
	assert.ErrorContains(t, err, "sharded.RelayoutConfig.To")

	require.NoError(t, servers[3].Kill())
	_, err = Relayout(ctx, relayoutConfig(ab[0], append(ab, servers[3].Addr())))
	require.Error(t, err)
	assert.Contains(t, err.Error(), servers[3].Addr()+" unreachable")
	n, err := servers[0].Do(ctx, "EXISTS", layoutkey.Transition(defaultAgreement))
	require.NoError(t, err)
	assert.EqualValues(t, 0, n, "nothing began")

	cfg := relayoutConfig(ab[0], abc)
	var other error
	cfg.OnPhase = func(p PhaseReport) {
		if p.Phase == shardcast.PhasePrepare {
			_, other = Relayout(ctx, relayoutConfig(ab[0], addrs(servers[0])))
		}
	}
	_, err = Relayout(ctx, cfg)
	require.NoError(t, err)
	assert.ErrorIs(t, other, shardcast.ErrRelayoutInProgress)
	assert.Contains(t, other.Error(), "phase switch")
}

// TestLateBarrierNotDelivered: a message on a re-layout's barrier channel
// that arrives while no re-layout (or another one) is under way, as a
// barrier the coordinator resent arrives after the finish, never reaches
// the Handler; the messages around it do.
func TestLateBarrierNotDelivered(t *testing.T) {
	servers := startServers(t, 1)
	rec := newRecorder()
	b := newBroker(t, Config{Addrs: addrs(servers[0]), Options: shardcast.Options{Handler: rec.handle}})
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	barrier := layoutkey.Barrier(defaultAgreement, "20261201T000000Z-0123456789ab")
	require.NoError(t, b.Subscribe(ctx, barrier, "after"))
	_, err := servers[0].Do(ctx, "PUBLISH", barrier, "20261201T000000Z-0123456789ab")
	require.NoError(t, err)
	require.NoError(t, b.Publish(ctx, "after", []byte("x")))
	waitFor(t, "the message after the barrier", func() bool { return rec.count("after") == 1 })
	assert.Zero(t, rec.count(barrier), "the barrier reached the Handler")
}
