package relayout

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/agreement"
	"github.com/shardcast/shardcast/internal/engine"
	"github.com/shardcast/shardcast/internal/layoutkey"
	"github.com/shardcast/shardcast/internal/pubconn"
	"github.com/shardcast/shardcast/internal/subconn"
	"github.com/shardcast/shardcast/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The coordinator tests drive a re-layout between two made-up layouts on
// a real control instance, with fake brokers that register through the
// agreement's heartbeat and acknowledge every phase they read: what the
// coordinator sees of a fleet, without the data path.

const (
	testHeartbeat = 50 * time.Millisecond
	// outage is well past HeartbeatsToExpire heartbeats: every
	// registration expires meanwhile by the control instance's clock.
	outage      = 10 * testHeartbeat
	testTimeout = 20 * time.Second
)

var (
	testAgreement = shardcast.Agreement{App: "coord-test:", Heartbeat: testHeartbeat}.WithDefaults()
	layoutOne     = shardcast.LayoutRecord{Fingerprint: "one", Description: "layout one", Engine: "sharded", Instances: []string{"a"}}
	layoutTwo     = shardcast.LayoutRecord{Fingerprint: "two", Description: "layout two", Engine: "sharded", Instances: []string{"a", "b"}}
)

// fault, if set on a testRunner, sees every call with its outcome and
// returns the outcome the coordinator gets.
type fault func(s *shardcast.Script, args []string, v any, err error) (any, error)

// testRunner returns a Runner on the control instance srv, each call
// bounded by two heartbeats (as an engine bounds it by CommandTimeout),
// and a place to set a fault. gates, if any, may refuse a call before it
// is sent.
func testRunner(t *testing.T, srv *redistest.Server, gates ...func() error) (agreement.Runner, func(fault)) {
	pub := pubconn.New(subconn.Dialer{Addr: srv.Addr(), Timeout: time.Second},
		pubconn.Timeouts{Write: time.Second, Reply: 2 * time.Second, Redial: 10 * time.Millisecond})
	t.Cleanup(pub.Close)
	var mu sync.Mutex
	var f fault
	run := func(ctx context.Context, s *shardcast.Script, keys, args []string) (any, error) {
		for _, g := range gates {
			if err := g(); err != nil {
				return nil, err
			}
		}
		ctx, cancel := context.WithTimeout(ctx, 2*testHeartbeat)
		defer cancel()
		v, err := engine.Eval(ctx, pub, s, keys, args)
		mu.Lock()
		ff := f
		mu.Unlock()
		if ff != nil {
			return ff(s, args, v, err)
		}
		return v, err
	}
	return run, func(nf fault) {
		mu.Lock()
		f = nf
		mu.Unlock()
	}
}

// isScript reports whether s is the transition script whose reply holds
// word ('begun', 'waiting', ...).
func isScript(s *shardcast.Script, word string) bool {
	return strings.Contains(s.Source(), "'"+word+"'")
}

// fakeFleet is n brokers on layoutOne.
type fakeFleet struct {
	t      *testing.T
	run    agreement.Runner
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu sync.Mutex
	// violations lists what a broker saw that the protocol forbids: a
	// phase entered, or the transition ended, without its acknowledgement
	// of the phase before.
	violations []string
	// hold, while set, keeps the brokers from acknowledging.
	hold bool
	// seen counts the brokers that read a transition.
	seen int
}

var nextPhase = map[string]string{
	shardcast.PhasePrepare: shardcast.PhaseSwitch, shardcast.PhaseSwitch: shardcast.PhaseDrain,
	shardcast.PhaseDrain: shardcast.PhaseFinish,
}

func startFakeFleet(t *testing.T, n int, run agreement.Runner) *fakeFleet {
	ctx, cancel := context.WithCancel(context.Background())
	f := &fakeFleet{t: t, run: run, cancel: cancel}
	for i := range n {
		m, err := agreement.Join(ctx, agreement.Config{
			Agreement: testAgreement, Run: run, Where: "control", Ours: layoutOne,
			Timeout: 2 * testHeartbeat, Emit: func(shardcast.Event) {}, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		})
		require.NoError(t, err)
		m.Start(ctx, func(g func()) { f.wg.Go(g) })
		f.wg.Go(func() {
			defer m.Leave()
			f.follow(ctx, m.ID(), i)
		})
	}
	t.Cleanup(f.stop)
	return f
}

func (f *fakeFleet) stop() {
	f.cancel()
	f.wg.Wait()
}

// follow polls the transition every heartbeat and acknowledges each phase
// it reads, checking that the fleet never left a phase it had not
// acknowledged.
func (f *fakeFleet) follow(ctx context.Context, id string, i int) {
	var id0, acked string // the transition followed, the last phase acked
	tick := time.NewTicker(testHeartbeat)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		st, err := agreement.ReadTransition(ctx, f.run, testAgreement)
		if err != nil {
			continue
		}
		if st.T == nil {
			if id0 != "" && acked != shardcast.PhaseFinish && acked != shardcast.PhaseAbort {
				f.violate("broker %d: the transition ended after it acknowledged %q only", i, acked)
			}
			id0, acked = "", ""
			continue
		}
		if id0 != st.T.ID {
			id0, acked = st.T.ID, ""
			f.mu.Lock()
			f.seen++
			f.mu.Unlock()
		}
		if a, ok := strings.CutPrefix(st.Acks[id], st.T.ID+" "); ok {
			acked = a // an ack whose reply was lost still counts
		}
		p := st.T.Phase
		if p == acked {
			continue
		}
		if acked != "" && p != shardcast.PhaseAbort && nextPhase[acked] != p {
			f.violate("broker %d: the transition went to %q after it acknowledged %q", i, p, acked)
		}
		if acked == "" && p != shardcast.PhasePrepare && p != shardcast.PhaseAbort {
			f.violate("broker %d: first read the transition in %q", i, p)
		}
		f.mu.Lock()
		hold := f.hold
		f.mu.Unlock()
		if hold {
			continue
		}
		if ok, err := agreement.Ack(ctx, f.run, testAgreement, id, st.T.ID, p); err == nil && ok {
			acked = p
		}
	}
}

func (f *fakeFleet) violate(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.violations = append(f.violations, fmt.Sprintf(format, args...))
}

func (f *fakeFleet) setHold(h bool) {
	f.mu.Lock()
	f.hold = h
	f.mu.Unlock()
}

func (f *fakeFleet) check() {
	f.mu.Lock()
	defer f.mu.Unlock()
	assert.Empty(f.t, f.violations, "the fleet left a phase some broker had not acknowledged")
}

// newCoordinatorTest starts a control instance (with opts), a fleet of n
// fake brokers on it and a coordinator, whose calls go through fault.
func newCoordinatorTest(t *testing.T, n int, opts ...redistest.Option) (*redistest.Server, *fakeFleet, *Coordinator, func(fault)) {
	srv := redistest.StartStandalone(t, opts...)
	// A broker's call made while the control instance is frozen is not
	// sent, so not run when it thaws (as one on a connection the broker
	// gave up on): the coordinator's call queued before the outage runs
	// first, the worst case.
	fleetRun, _ := testRunner(t, srv, func() error {
		if srv.Paused() {
			return errors.New("test: the control instance does not answer")
		}
		return nil
	})
	f := startFakeFleet(t, n, fleetRun)
	run, setFault := testRunner(t, srv)
	return srv, f, &Coordinator{Agreement: testAgreement, Run: run, Name: "test"}, setFault
}

// relayout runs the coordinator to layoutTwo, bounded by testTimeout.
func relayout(ctx context.Context, c *Coordinator) (shardcast.RelayoutReport, error) {
	t, rep, err := c.Begin(ctx, layoutTwo)
	if err != nil {
		return rep, err
	}
	err = c.Drive(ctx, t, &rep, nil)
	return rep, err
}

// checkDone checks a re-layout that completed: no error, every phase
// completed with the whole fleet live, the record layoutTwo, the
// transition gone.
func checkDone(t *testing.T, srv *redistest.Server, f *fakeFleet, n int, rep shardcast.RelayoutReport, err error) {
	t.Helper()
	require.NoError(t, err)
	f.stop()
	f.check()
	require.Len(t, rep.Phases, 4)
	for _, p := range rep.Phases {
		assert.Equal(t, n, p.Brokers, "live brokers at the end of phase %s", p.Phase)
	}
	fp, err := srv.Do(context.Background(), "HGET", testAgreement.RecordKey(), "fingerprint")
	require.NoError(t, err)
	assert.Equal(t, layoutTwo.Fingerprint, fp, "the record")
	ex, err := srv.Do(context.Background(), "EXISTS", layoutkey.Transition(testAgreement))
	require.NoError(t, err)
	assert.EqualValues(t, 0, ex, "the transition ended")
}

// TestCoordinatorWaitsOutControlOutage: the control instance is frozen
// (SIGSTOP) or killed and restarted (with persistence) as the switch
// begins, for many heartbeats: every registration has expired when it
// answers again, and an advance queued before the outage runs first. The
// coordinator must wait for the registry to refill and for every broker's
// acknowledgement, not advance with nobody.
func TestCoordinatorWaitsOutControlOutage(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []redistest.Option
		down func(*redistest.Server) error
		up   func(*redistest.Server) error
	}{
		{"frozen", nil, (*redistest.Server).Pause, (*redistest.Server).Resume},
		{"restarted", []redistest.Option{redistest.WithArgs("--appendonly", "yes", "--appendfsync", "always")},
			(*redistest.Server).Kill, func(s *redistest.Server) error { return s.Restart(context.Background()) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const n = 3
			srv, f, c, _ := newCoordinatorTest(t, n, tc.opts...)
			var bg sync.WaitGroup
			defer bg.Wait()
			c.OnPhase = func(p shardcast.RelayoutPhaseReport) {
				if p.Phase == shardcast.PhasePrepare {
					require.NoError(t, tc.down(srv))
					bg.Go(func() {
						time.Sleep(outage) // fault injection, not synchronisation
						assert.NoError(t, tc.up(srv))
					})
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			rep, err := relayout(ctx, c)
			bg.Wait()
			checkDone(t, srv, f, n, rep, err)
		})
	}
}

// TestCoordinatorLostAdvanceReply: the reply of the advance that moved
// the transition to the switch is lost (the control instance ran it, the
// connection broke): the next advance finds the transition already in
// the switch, and the coordinator goes on.
func TestCoordinatorLostAdvanceReply(t *testing.T) {
	const n = 2
	srv, f, c, setFault := newCoordinatorTest(t, n)
	var once sync.Once
	setFault(func(s *shardcast.Script, args []string, v any, err error) (any, error) {
		if err == nil && isScript(s, "waiting") && args[2] == shardcast.PhaseSwitch {
			if r, _ := v.([]any); len(r) > 0 && r[0] == "ok" {
				lost := false
				once.Do(func() { lost = true })
				if lost {
					return nil, errors.New("test: reply lost")
				}
			}
		}
		return v, err
	})
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	rep, err := relayout(ctx, c)
	checkDone(t, srv, f, n, rep, err)
}

// TestCoordinatorControlFrozenAfterBegin: the control instance freezes
// right after it began the transition, before the coordinator reads
// anything else: the coordinator goes on once it thaws, rather than
// failing with the transition left behind.
func TestCoordinatorControlFrozenAfterBegin(t *testing.T) {
	const n = 2
	srv, f, c, setFault := newCoordinatorTest(t, n)
	var bg sync.WaitGroup
	defer bg.Wait()
	var once sync.Once
	setFault(func(s *shardcast.Script, args []string, v any, err error) (any, error) {
		if err == nil && isScript(s, "begun") {
			once.Do(func() {
				require.NoError(t, srv.Pause())
				bg.Go(func() {
					time.Sleep(outage) // fault injection, not synchronisation
					assert.NoError(t, srv.Resume())
				})
			})
		}
		return v, err
	})
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	rep, err := relayout(ctx, c)
	bg.Wait()
	checkDone(t, srv, f, n, rep, err)
}

// TestCoordinatorTransitionVanishes: the control instance loses the
// transition (restarted without persistence) while the coordinator waits
// at the prepare: it returns an error saying so, long before its ctx
// ends.
func TestCoordinatorTransitionVanishes(t *testing.T) {
	srv, f, c, _ := newCoordinatorTest(t, 2)
	f.setHold(true) // keep the coordinator waiting at the prepare
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	var bg sync.WaitGroup
	defer bg.Wait()
	bg.Go(func() {
		waitFor(t, "the brokers to read the transition", func() bool {
			f.mu.Lock()
			defer f.mu.Unlock()
			return f.seen == 2
		})
		assert.NoError(t, srv.Kill())
		assert.NoError(t, srv.Restart(context.Background()))
	})
	_, err := relayout(ctx, c)
	bg.Wait()
	require.ErrorIs(t, err, shardcast.ErrRelayoutVanished)
	assert.NoError(t, ctx.Err(), "returned before its ctx ended")
	assert.NotErrorIs(t, err, shardcast.ErrRelayoutAborted)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	deadline := time.Now().Add(testTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Errorf("timed out waiting for %s", what)
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestWaitedFor: a re-layout cut short by its ctx says what the phase was
// still waiting for; other errors pass unchanged.
func TestWaitedFor(t *testing.T) {
	err := waitedFor(context.DeadlineExceeded, shardcast.PhaseDrain, agreement.AdvanceResult{Waiting: []string{"b1", "b2"}})
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.ErrorContains(t, err, "phase drain: waiting for the acknowledgement of brokers [b1 b2]")
	err = waitedFor(context.Canceled, shardcast.PhaseSwitch, agreement.AdvanceResult{Refilling: 1500 * time.Millisecond})
	assert.ErrorContains(t, err, "refilling")
	assert.ErrorContains(t, err, "1.5s to go")
	assert.ErrorContains(t, waitedFor(context.Canceled, shardcast.PhasePrepare, agreement.AdvanceResult{NoBroker: true}), "no broker is live")
	other := errors.New("boom")
	assert.Same(t, other, waitedFor(other, shardcast.PhaseDrain, agreement.AdvanceResult{Waiting: []string{"b1"}}))
}

// TestCoordinatorAbortIsBounded: when the coordinator's ctx ends and a
// live broker never acknowledges the abort, the abort gives up after its
// bound, saying which brokers it waited for, and leaves the transition in
// its abort phase for the brokers to roll back and a later run to end.
func TestCoordinatorAbortIsBounded(t *testing.T) {
	defer func(d time.Duration) { minAbortWait = d }(minAbortWait)
	minAbortWait = 0 // abortWait heartbeats: 1.5 s here
	srv, f, c, _ := newCoordinatorTest(t, 2)
	f.setHold(true)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err := relayout(ctx, c)
	require.ErrorIs(t, err, shardcast.ErrRelayoutAborted)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Contains(t, err.Error(), "phase abort: waiting for the acknowledgement of brokers")
	phase, err := srv.Do(context.Background(), "HGET", layoutkey.Transition(testAgreement), "phase")
	require.NoError(t, err)
	assert.Equal(t, shardcast.PhaseAbort, phase, "the abort stays recorded")

	f.setHold(false) // the brokers acknowledge; running the abort again ends it
	require.NoError(t, c.AbortCurrent(context.Background()))
	n, err := srv.Do(context.Background(), "EXISTS", layoutkey.Transition(testAgreement))
	require.NoError(t, err)
	assert.EqualValues(t, 0, n, "the transition ended")
}
