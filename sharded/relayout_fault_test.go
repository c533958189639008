package sharded

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/brokertest"
	"github.com/shardcast/shardcast/internal/layoutkey"
	"github.com/shardcast/shardcast/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The fault tests move three brokers, each subscribing 150 channels and
// publishing numbered messages to all of them without pause, from 2 to 3
// instances while an instance fails, and check every message with
// brokertest.CheckMessages: every loss inside a window the subscriber's broker
// reported, no duplicate, no unreported reordering, and the re-layout
// completed or aborted cleanly (every broker on the recorded layout, the
// transition gone, no channel wanted twice).

// faultTolerance is the slack between a Publish call and the start of a
// reported window: a message Redis took just before it died may be lost
// on a connection the subscriber notices dead a moment later.
const faultTolerance = 250 * time.Millisecond

// faultSetup is one fault test's servers and fleet.
type faultSetup struct {
	t        *testing.T
	servers  []*redistest.Server // A, B (the old list), C (added), and the control instance
	old, new []string
	control  *redistest.Server
	channels []string
	fleet    *brokertest.FaultFleet
	bg       sync.WaitGroup // fault injections still running
	// unclean is set when the control instance loses the transition:
	// the fleet may end on either layout.
	unclean bool
}

// newFaultSetup starts A, B and C, and a separate control instance when
// separateControl is set (otherwise A holds the record), and a fleet of
// three brokers on A, B. cfg may set BarrierTimeout.
func newFaultSetup(t *testing.T, separateControl bool, cfg Config, controlOpts ...redistest.Option) *faultSetup {
	s := &faultSetup{t: t, servers: startServers(t, 3)}
	s.old, s.new = addrs(s.servers[0], s.servers[1]), addrs(s.servers...)
	s.control = s.servers[0]
	if separateControl {
		s.control = redistest.StartStandalone(t, controlOpts...)
		cfg.ControlAddr = s.control.Addr()
	}
	cfg.Addrs, cfg.Conn = s.old, faultConn
	cfg.Agreement = shardcast.Agreement{Heartbeat: relayoutHeartbeat}
	s.channels = channelNames("fault-", 150)
	s.fleet = newFaultFleet(t, 3, cfg, s.channels)
	s.fleet.WaitPublished(1500)
	return s
}

// later runs f on a goroutine after d; the test waits for it before it
// checks.
func (s *faultSetup) later(d time.Duration, f func()) {
	s.bg.Go(func() {
		time.Sleep(d) // fault injection, not synchronisation
		f()
	})
}

// relayout runs the re-layout to A, B, C with hook as OnPhase.
func (s *faultSetup) relayout(hook func(PhaseReport)) (RelayoutReport, error) {
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	cfg := relayoutConfig(s.control.Addr(), s.new)
	cfg.Conn = faultConn
	cfg.OnPhase = hook
	rep, err := Relayout(ctx, cfg)
	for _, p := range rep.Phases {
		s.t.Logf("phase %-7s %8v  %d brokers  %d barriers", p.Phase, p.Took.Round(time.Millisecond), p.Brokers, p.Barriers)
	}
	s.t.Logf("outcome: aborted %v, err %v", rep.Aborted, err)
	return rep, err
}

// check waits for the fault injections, lets traffic flow a little more,
// checks every message and the end state, and returns the figures.
func (s *faultSetup) check(err error) brokertest.FaultFigures {
	t := s.t
	s.bg.Wait()
	for _, srv := range append(s.servers, s.control) {
		if !srv.Running() {
			require.NoError(t, srv.Restart(context.Background()))
		}
	}
	if err != nil {
		require.ErrorIs(t, err, shardcast.ErrRelayoutAborted)
	}
	s.fleet.WaitPublished(1500)
	fig := s.fleet.Finish(faultTolerance)
	brokertest.AssertClean(t, fig)

	want, ferr := Fingerprint(s.old)
	require.NoError(t, ferr)
	if err == nil {
		want, ferr = Fingerprint(s.new)
		require.NoError(t, ferr)
	}
	if s.unclean {
		// Either layout will do, as long as the record and every broker
		// agree on it.
		waitFor(t, "the record to be written again", func() bool {
			fields, _ := recordOn(t, s.control, defaultAgreement)
			want = fields["fingerprint"]
			return want != ""
		})
	}
	waitFor(t, "the transition to end", func() bool {
		n, err := s.control.Do(context.Background(), "EXISTS", layoutkey.Transition(defaultAgreement))
		return err == nil && n == int64(0)
	})
	fields, _ := recordOn(t, s.control, defaultAgreement)
	for i, b := range s.fleet.Brokers {
		t.Logf("broker %d on %s, the record %s; re-layout events %v", i, b.(*Broker).Fingerprint(), fields["fingerprint"], s.fleet.Events[i].RelayoutPhases())
	}
	assert.Equal(t, want, fields["fingerprint"], "the record")
	for _, x := range s.fleet.Brokers {
		b := x.(*Broker)
		waitFor(t, "every broker on the recorded layout", func() bool { return b.Fingerprint() == want })
		waitFor(t, "one subscription per channel", func() bool { return b.Stats().Channels == len(s.channels) })
	}
	return fig
}

// TestRelayoutOldInstanceKilledDuringDrain: old instance B dies as the
// drain begins (the first barriers are lost on it) and comes back half a
// second later; the coordinator's resent barrier completes the drain.
func TestRelayoutOldInstanceKilledDuringDrain(t *testing.T) {
	s := newFaultSetup(t, false, Config{})
	b := s.servers[1]
	_, err := s.relayout(func(p PhaseReport) {
		if p.Phase == shardcast.PhaseSwitch {
			require.NoError(t, b.Kill())
			s.later(500*time.Millisecond, func() { assert.NoError(t, b.Restart(context.Background())) })
		}
	})
	s.check(err)
	assert.NotZero(t, s.fleet.Interrupted(), "B's death was reported")
}

// TestRelayoutOldInstanceKilledBarrierTimeout: the same, but B stays
// down past the brokers' BarrierTimeout: they hand over without its
// barrier and report the channels whose order they could not keep.
func TestRelayoutOldInstanceKilledBarrierTimeout(t *testing.T) {
	s := newFaultSetup(t, false, Config{BarrierTimeout: 300 * time.Millisecond})
	b := s.servers[1]
	_, err := s.relayout(func(p PhaseReport) {
		if p.Phase == shardcast.PhaseSwitch {
			require.NoError(t, b.Kill())
			s.later(1500*time.Millisecond, func() { assert.NoError(t, b.Restart(context.Background())) })
		}
	})
	s.check(err)
	assert.True(t, s.fleet.ReportedPhase(shardcast.PhaseBarrierTimeout), "a barrier timeout was reported")
}

// TestRelayoutNewInstanceKilledDuringPrepare: the new instance C dies as
// the first broker finished preparing, and comes back half a second
// later: the others' prepare retries until it is back.
func TestRelayoutNewInstanceKilledDuringPrepare(t *testing.T) {
	s := newFaultSetup(t, false, Config{})
	c := s.servers[2]
	var once sync.Once
	stop := make(chan struct{})
	defer close(stop)
	s.bg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
			if s.fleet.ReportedPhase(shardcast.PhasePrepare) {
				once.Do(func() {
					assert.NoError(t, c.Kill())
					s.later(500*time.Millisecond, func() { assert.NoError(t, c.Restart(context.Background())) })
				})
				return
			}
		}
	})
	_, err := s.relayout(nil)
	s.check(err)
}

// TestRelayoutNewInstanceKilledDuringSwitch: C dies as the switch begins
// (publishers start sending moving channels there) and comes back half a
// second later.
func TestRelayoutNewInstanceKilledDuringSwitch(t *testing.T) {
	s := newFaultSetup(t, false, Config{})
	c := s.servers[2]
	_, err := s.relayout(func(p PhaseReport) {
		if p.Phase == shardcast.PhasePrepare {
			require.NoError(t, c.Kill())
			s.later(500*time.Millisecond, func() { assert.NoError(t, c.Restart(context.Background())) })
		}
	})
	s.check(err)
	assert.NotZero(t, s.fleet.Interrupted(), "C's death was reported")
}

// TestRelayoutOldInstanceFrozenDuringSwitch: B freezes (SIGSTOP) as the
// switch begins, past the health timeout, and thaws a second later:
// publishes of moving channels waiting on it fail or are answered before
// the switch is acknowledged.
func TestRelayoutOldInstanceFrozenDuringSwitch(t *testing.T) {
	s := newFaultSetup(t, false, Config{})
	b := s.servers[1]
	_, err := s.relayout(func(p PhaseReport) {
		if p.Phase == shardcast.PhasePrepare {
			require.NoError(t, b.Pause())
			s.later(time.Second, func() { assert.NoError(t, b.Resume()) })
		}
	})
	s.check(err)
	assert.NotZero(t, s.fleet.Interrupted(), "B's freeze was reported")
}

// TestRelayoutControlFrozen: the control instance, which holds the
// record, freezes for a second as the switch begins (every registration
// expires meanwhile by its clock): the fleet waits and the re-layout
// resumes when it thaws: every registration has expired by its clock
// then, and the coordinator's advance waits for the brokers to register
// again before it moves on (before, all phases could advance with no
// broker within milliseconds).
func TestRelayoutControlFrozen(t *testing.T) {
	s := newFaultSetup(t, true, Config{})
	_, err := s.relayout(func(p PhaseReport) {
		if p.Phase == shardcast.PhasePrepare {
			require.NoError(t, s.control.Pause())
			s.later(time.Second, func() { assert.NoError(t, s.control.Resume()) })
		}
	})
	s.check(err)
}

// TestRelayoutControlRestarted: the control instance, which holds the
// record and persists it (appendonly), is killed as the drain begins and
// restarted a second later.
func TestRelayoutControlRestarted(t *testing.T) {
	s := newFaultSetup(t, true, Config{}, redistest.WithArgs("--appendonly", "yes", "--appendfsync", "always"))
	_, err := s.relayout(func(p PhaseReport) {
		if p.Phase == shardcast.PhaseSwitch {
			require.NoError(t, s.control.Kill())
			s.later(time.Second, func() { assert.NoError(t, s.control.Restart(context.Background())) })
		}
	})
	s.check(err)
}

// TestRelayoutNewInstanceDeadAborts: the new instance C dies as soon as
// the re-layout began and stays down; brokers that had not prepared yet
// cannot, the coordinator's ctx ends and it aborts: every broker returns
// to the old list, and nothing is lost outside a reported window. (Had
// every broker prepared before the kill, the re-layout goes on and ends
// on the new list, publishes of moving channels failing while C is down;
// both are clean ends.)
func TestRelayoutNewInstanceDeadAborts(t *testing.T) {
	s := newFaultSetup(t, false, Config{})
	c := s.servers[2]
	stop := make(chan struct{})
	s.bg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
			if n, err := s.control.Do(context.Background(), "EXISTS", layoutkey.Transition(defaultAgreement)); err == nil && n == int64(1) {
				assert.NoError(t, c.Kill())
				return
			}
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	cfg := relayoutConfig(s.control.Addr(), s.new)
	cfg.Conn = faultConn
	rep, err := Relayout(ctx, cfg)
	close(stop)
	t.Logf("outcome: aborted %v, err %v, phases %v", rep.Aborted, err, phaseNames(rep.Phases))
	if err != nil {
		require.ErrorIs(t, err, shardcast.ErrRelayoutAborted)
	}
	s.check(err)
}

// TestRelayoutControlLosesItsData: the control instance is killed as the
// switch begins and restarted without persistence: the transition, the
// record and the registry are gone. The first heartbeat writes the record
// again, with the layout its broker publishes under, and every broker
// follows it: back to the old list (reporting the moving channels' order
// as not guaranteed) or on to the new one, keeping the subscriptions of
// the layout it leaves for a grace period, so that what the others
// publish there until they notice still arrives. The coordinator
// fails at once: its transition vanished (ErrRelayoutVanished).
func TestRelayoutControlLosesItsData(t *testing.T) {
	s := newFaultSetup(t, true, Config{})
	s.unclean = true
	_, err := s.relayout(func(p PhaseReport) {
		if p.Phase == shardcast.PhasePrepare {
			s.fleet.WaitPublished(500) // some under the new list
			require.NoError(t, s.control.Kill())
			s.later(200*time.Millisecond, func() { assert.NoError(t, s.control.Restart(context.Background())) })
		}
	})
	require.ErrorIs(t, err, shardcast.ErrRelayoutVanished, "the transition vanished under the coordinator")
	s.check(shardcast.ErrRelayoutAborted)
}

// TestRelayoutOldInstanceFrozenSwitchOutlastsStep: as above, but the
// brokers' switch step gives up waiting for their publishes under the old
// list long before those are answered (CommandTimeout well under the
// freeze, ReplyTimeout and HealthTimeout over it): the retried step must
// still wait for them before it acknowledges the switch, or a publish the
// frozen instance runs after the barrier is delivered after newer
// messages.
func TestRelayoutOldInstanceFrozenSwitchOutlastsStep(t *testing.T) {
	conn := faultConn
	faultConn.CommandTimeout, faultConn.ReplyTimeout, faultConn.HealthTimeout = 250*time.Millisecond, 3*time.Second, 3*time.Second
	faultPublishers = 8 // so that some publish of a moving channel waits on B
	defer func() { faultConn, faultPublishers = conn, 1 }()
	s := newFaultSetup(t, false, Config{})
	faultConn, faultPublishers = conn, 1 // the coordinator's
	b := s.servers[1]
	_, err := s.relayout(func(p PhaseReport) {
		if p.Phase == shardcast.PhasePrepare {
			require.NoError(t, b.Pause())
			s.later(time.Second, func() { assert.NoError(t, b.Resume()) })
		}
	})
	s.check(err)
}

// TestRelayoutControlFrozenDuringPrepare: the control instance freezes
// for a second as soon as the re-layout began, before the brokers read
// it. When it thaws, every registration has expired: unless the
// coordinator waits for the brokers to register again, it moves to the
// switch with nobody prepared, and a broker that switches before another
// prepared publishes where that one does not listen yet.
func TestRelayoutControlFrozenDuringPrepare(t *testing.T) {
	s := newFaultSetup(t, true, Config{})
	stop := make(chan struct{})
	s.bg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
			if n, err := s.control.Do(context.Background(), "EXISTS", layoutkey.Transition(defaultAgreement)); err == nil && n == int64(1) {
				assert.NoError(t, s.control.Pause())
				s.later(time.Second, func() { assert.NoError(t, s.control.Resume()) })
				return
			}
		}
	})
	_, err := s.relayout(nil)
	close(stop)
	s.check(err)
}

// TestRelayoutControlRestartedDuringPrepare: the control instance (with
// persistence) is killed as soon as the re-layout began and restarted a
// second later: as in TestRelayoutControlFrozenDuringPrepare, every
// registration has expired when it is back.
func TestRelayoutControlRestartedDuringPrepare(t *testing.T) {
	s := newFaultSetup(t, true, Config{}, redistest.WithArgs("--appendonly", "yes", "--appendfsync", "always"))
	stop := make(chan struct{})
	s.bg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
			if n, err := s.control.Do(context.Background(), "EXISTS", layoutkey.Transition(defaultAgreement)); err == nil && n == int64(1) {
				assert.NoError(t, s.control.Kill())
				s.later(time.Second, func() { assert.NoError(t, s.control.Restart(context.Background())) })
				return
			}
		}
	})
	_, err := s.relayout(nil)
	close(stop)
	if err != nil && !errors.Is(err, shardcast.ErrRelayoutAborted) {
		// The kill may cut off the reply of begin itself: the error
		// says the re-layout may have begun; run it again, as an
		// operator would, to resume it.
		t.Logf("coordinator failed: %v; resuming", err)
		s.bg.Wait() // the control instance is back
		_, err = s.relayout(nil)
	}
	s.check(err)
}
