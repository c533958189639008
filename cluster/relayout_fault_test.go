package cluster

import (
	"context"
	"sync"
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

// The Redis fault cases of the online re-layout move three brokers, each
// subscribing 200 channels and publishing numbered messages to all of
// them without pause, from 128 to 1024 partitions while a master fails,
// and check every message (brokertest.FaultFleet): every loss inside a
// window the subscriber's broker reported, no duplicate, no unreported
// reordering; and the re-layout completed or aborted cleanly: the record
// holds the layout every broker ends on, the transition is gone, and
// each broker wants each channel once. A killed master is restarted as
// soon as its replica took over, as an operator's supervisor would: the
// restarted node claims its old slots for a moment before it learns it
// was replaced.

// faultConn are connection settings that notice a dead or frozen master
// quickly, so that the fault cases stay short.
var faultConn = shardcast.ConnOptions{
	DialTimeout: time.Second, CommandTimeout: time.Second,
	HealthInterval: 100 * time.Millisecond, HealthTimeout: 300 * time.Millisecond,
	ReplyTimeout: time.Second, WriteTimeout: 500 * time.Millisecond,
	ReconnectMax: 200 * time.Millisecond, RecoveryInterval: 100 * time.Millisecond,
}

// faultTolerance is the slack between a Publish call and the start of a
// reported window: a message a master took just before it died may be
// lost on a connection the subscriber notices dead a moment later. (A
// window's end needs none: see brokertest.CheckMessages.)
const faultTolerance = 250 * time.Millisecond

// freezeFor is how long a frozen master stays frozen: past the brokers'
// health timeout and the cluster's node timeout (1 s), so that the
// brokers and the cluster both notice; its replica is told not to take
// over meanwhile.
const freezeFor = 1500 * time.Millisecond

// TestRelayoutRedisFaults runs the fault cases on one cluster with
// replicas, one after the other, each under an Agreement.App of its own;
// a killed master comes back as a replica of its successor before the
// next case.
func TestRelayoutRedisFaults(t *testing.T) {
	c := redistest.StartCluster(t, 3, 1)
	for _, fc := range []faultCase{
		// A master (not the record's) dies as the first broker finished
		// preparing: the others' twin subscriptions on its partitions wait
		// for its replica, and the coordinator for them.
		{name: "MasterKilledDuringPrepare"},
		// A master (not the record's) dies as the switch begins: publishes
		// of moving channels to it fail or wait for the failover before
		// the brokers acknowledge the switch, and its partitions' barriers
		// come once the subscribers resubscribed on its replica (or the
		// brokers hand over without them, reporting it).
		{name: "MasterKilledAtSwitch", at: shardcast.PhasePrepare},
		// The master holding the layout record and the transition freezes
		// as the drain begins, past the cluster's node timeout, without a
		// failover: phases stall, every registration expires by its clock,
		// and when it thaws the coordinator waits for the brokers to
		// register again before it moves on.
		{name: "RecordMasterFrozenDuringDrain", record: true, freeze: true, at: shardcast.PhaseSwitch},
		// The same as the switch begins: the brokers' switch
		// acknowledgements wait for it, and publishes of moving channels
		// to it fail or are answered when it thaws.
		{name: "RecordMasterFrozenAtSwitch", record: true, freeze: true, at: shardcast.PhasePrepare},
		// The master holding the layout record and the transition dies as
		// the first broker finished preparing; its replica, promoted, holds
		// the transition (replicated long before), maybe without the
		// latest acknowledgements, which the brokers then repeat.
		{name: "RecordMasterKilledDuringPrepare", record: true},
	} {
		t.Run(fc.name, func(t *testing.T) { testRelayoutFault(t, c, fc) })
	}
}

// faultCase is one fault: which master it strikes (the record's or
// another), how (killed, or frozen with SIGSTOP) and when: as soon as one
// broker reported that it prepared (at ""), or as the coordinator reports
// phase at done (the next one begins).
type faultCase struct {
	name           string
	record, freeze bool
	at             string
}

// testRelayoutFault runs one fault case.
func testRelayoutFault(t *testing.T, c *redistest.Cluster, fc faultCase) {
	s := newRelayoutFault(t, c, fc.name+":")
	victim := s.recordMaster()
	if !fc.record {
		victim = s.otherMaster(victim)
	}
	strike := func() { s.kill(victim) }
	if fc.freeze {
		s.keepReplicas(victim)
		strike = func() { s.freeze(victim) }
	}
	var hook func(shardcast.RelayoutPhaseReport)
	if fc.at == "" {
		s.atFirstPrepare(strike)
	} else {
		hook = func(p shardcast.RelayoutPhaseReport) {
			if p.Phase == fc.at {
				strike()
			}
		}
	}
	err := s.relayout(hook)
	s.check(err)
	assert.NotZero(t, s.fleet.Interrupted(), "the fault was reported")
}

// relayoutFault is one fault case's fleet and the faults it injects.
type relayoutFault struct {
	t        *testing.T
	c        *redistest.Cluster
	a        shardcast.Agreement
	channels []string
	fleet    *brokertest.FaultFleet
	// bg runs the fault injections and recoveries; stop ends the
	// watchers that wait for their moment.
	bg   sync.WaitGroup
	stop chan struct{}
	once sync.Once
}

// newRelayoutFault starts a fleet of three brokers on 128 partitions
// under App app, publishing, and waits until they published a while.
func newRelayoutFault(t *testing.T, c *redistest.Cluster, app string) *relayoutFault {
	s := &relayoutFault{t: t, c: c, a: relayoutAgreement(app), channels: numbered(app, 200), stop: make(chan struct{})}
	t.Cleanup(func() { s.halt(); s.bg.Wait() })
	s.fleet = brokertest.NewFaultFleet(t, 3, s.channels, brokertest.FaultFleetOptions{},
		func(h shardcast.Handler, ev func(shardcast.Event)) shardcast.Broker {
			return newBroker(t, Config{Addrs: c.Seeds(), Partitions: 128, Conn: faultConn, Agreement: s.a,
				Options: shardcast.Options{Handler: h, OnEvent: ev, QueueSize: 1 << 16}})
		})
	s.fleet.WaitPublished(1500)
	return s
}

// halt ends the watchers still waiting for their moment.
func (s *relayoutFault) halt() { s.once.Do(func() { close(s.stop) }) }

// recordMaster returns the master that holds the layout record (and the
// transition, in the same slot).
func (s *relayoutFault) recordMaster() *redistest.Server {
	owner, err := s.c.MasterOfSlot(testCtx(s.t, 10*time.Second), crc16.Slot(s.a.RecordKey()))
	require.NoError(s.t, err)
	return owner
}

// otherMaster returns a master other than not.
func (s *relayoutFault) otherMaster(not *redistest.Server) *redistest.Server {
	masters, err := s.c.Masters(testCtx(s.t, 10*time.Second))
	require.NoError(s.t, err)
	for _, m := range masters {
		if m != not {
			return m
		}
	}
	s.t.Fatalf("no master other than %s", not.Addr())
	return nil
}

// atFirstPrepare runs fault as soon as some broker reported that it
// prepared (the others may still be preparing).
func (s *relayoutFault) atFirstPrepare(fault func()) {
	s.bg.Go(func() {
		for !s.fleet.ReportedPhase(shardcast.PhasePrepare) {
			select {
			case <-s.stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
		fault()
	})
}

// kill SIGKILLs master victim; in the background, it waits for its
// replica to take over and restarts it, as a replica of its successor.
// It may run on any goroutine.
func (s *relayoutFault) kill(victim *redistest.Server) {
	killed := time.Now()
	if !assert.NoError(s.t, victim.Kill()) {
		return
	}
	s.t.Logf("killed master %s", victim.Addr())
	s.bg.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		promoted, err := s.c.WaitFailover(ctx, victim)
		if !assert.NoError(s.t, err) {
			return
		}
		s.t.Logf("replica %s promoted %v after the kill", promoted.Addr(), time.Since(killed).Round(time.Millisecond))
		assert.NoError(s.t, s.c.RestartNode(ctx, victim))
	})
}

// keepReplicas keeps victim's replicas from taking over while it is
// frozen, until the end of the test.
func (s *relayoutFault) keepReplicas(victim *redistest.Server) {
	ctx := testCtx(s.t, 10*time.Second)
	replicas, err := s.c.ReplicasOf(ctx, victim)
	require.NoError(s.t, err)
	set := func(v string) error {
		for _, r := range replicas {
			if _, err := r.Do(ctx, "CONFIG", "SET", "cluster-replica-no-failover", v); err != nil {
				return err
			}
		}
		return nil
	}
	require.NoError(s.t, set("yes"))
	s.t.Cleanup(func() {
		if victim.Paused() {
			_ = victim.Resume()
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		assert.NoError(s.t, s.c.WaitConverged(ctx))
		assert.NoError(s.t, set("no"))
	})
}

// freeze SIGSTOPs master victim, and thaws it freezeFor later. It may run
// on any goroutine.
func (s *relayoutFault) freeze(victim *redistest.Server) {
	if !assert.NoError(s.t, victim.Pause()) {
		return
	}
	s.t.Logf("froze master %s", victim.Addr())
	s.bg.Go(func() {
		time.Sleep(freezeFor) // fault injection, not synchronisation
		assert.NoError(s.t, victim.Resume())
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		assert.NoError(s.t, s.c.WaitConverged(ctx))
	})
}

// relayout moves the fleet to 1024 partitions with hook as OnPhase, and
// logs the phases and the outcome.
func (s *relayoutFault) relayout(hook func(shardcast.RelayoutPhaseReport)) error {
	cfg := clusterRelayoutConfig(s.c, s.a.App, 1024)
	cfg.Conn = faultConn
	cfg.OnPhase = hook
	before := s.fleet.Published()
	rep, err := Relayout(testCtx(s.t, 30*time.Second), cfg)
	logPhases(s.t, rep)
	outcome := "completed"
	if rep.Aborted {
		outcome = "aborted"
	}
	s.t.Logf("outcome: %s (err %v); %d messages published during the re-layout", outcome, err, s.fleet.Published()-before)
	return err
}

// check waits for the fault injections and recoveries, lets traffic flow
// a little more, checks every message and the end state, and returns the
// figures. err is what Relayout returned: nil (completed) or one wrapping
// shardcast.ErrRelayoutAborted.
func (s *relayoutFault) check(err error) brokertest.FaultFigures {
	t := s.t
	s.halt()
	s.bg.Wait()
	if err != nil {
		require.ErrorIs(t, err, shardcast.ErrRelayoutAborted)
	}
	s.fleet.WaitPublished(1500)
	fig := s.fleet.Finish(faultTolerance)
	brokertest.AssertClean(t, fig)
	s.fleet.LogEvents()

	want := layoutOf(t, 1024, "").Fingerprint()
	if err != nil {
		want = layoutOf(t, 128, "").Fingerprint()
	}
	ctx := testCtx(t, 30*time.Second)
	slot := crc16.Slot(s.a.RecordKey())
	var record any
	require.True(t, waitFor(20*time.Second, func() bool {
		owner, err := s.c.MasterOfSlot(ctx, slot)
		if err != nil {
			return false
		}
		n, err := owner.Do(ctx, "EXISTS", layoutkey.Transition(s.a))
		if err != nil || n != int64(0) {
			return false
		}
		record, err = owner.Do(ctx, "HGET", s.a.RecordKey(), "fingerprint")
		return err == nil
	}), "the transition never ended")
	assert.Equal(t, want, record, "the record")
	for i, x := range s.fleet.Brokers {
		b := x.(*Broker)
		assert.True(t, waitFor(10*time.Second, func() bool { return b.Fingerprint() == want }),
			"broker %d on %s, the record %v", i, b.Fingerprint(), record)
		assert.True(t, waitFor(10*time.Second, func() bool { return b.Stats().Channels == len(s.channels) }),
			"broker %d wants %d channels, not %d", i, b.Stats().Channels, len(s.channels))
	}
	return fig
}
