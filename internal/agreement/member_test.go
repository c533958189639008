package agreement

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"reflect"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/engine"
	"github.com/shardcast/shardcast/internal/pubconn"
	"github.com/shardcast/shardcast/internal/subconn"
	"github.com/shardcast/shardcast/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// waitTimeout bounds every wait for a condition; generous because the
// test machines are shared and run with -race.
const waitTimeout = 20 * time.Second

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", waitTimeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// runner returns a Runner on a pipelined connection to addr, closed when
// the test ends.
func runner(t *testing.T, addr string) Runner {
	t.Helper()
	pub := pubconn.New(subconn.Dialer{Addr: addr, Timeout: 2 * time.Second},
		pubconn.Timeouts{Write: time.Second, Reply: 2 * time.Second, Redial: 10 * time.Millisecond})
	t.Cleanup(pub.Close)
	return func(ctx context.Context, s *shardcast.Script, keys, args []string) (any, error) {
		return engine.Eval(ctx, pub, s, keys, args)
	}
}

// events collects what a Member emits.
type events struct {
	mu  sync.Mutex
	evs []shardcast.Event
}

func (e *events) add(ev shardcast.Event) {
	e.mu.Lock()
	e.evs = append(e.evs, ev)
	e.mu.Unlock()
}

func (e *events) all() []shardcast.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]shardcast.Event(nil), e.evs...)
}

// clusterLayout is a layout record as the cluster engine writes it.
func clusterLayout(t *testing.T, partitions int, prefix string) shardcast.LayoutRecord {
	t.Helper()
	l, err := shardcast.NewLayout(partitions, prefix)
	require.NoError(t, err)
	return shardcast.LayoutRecord{
		Fingerprint: l.Fingerprint(),
		Description: "cluster: " + strconv.Itoa(partitions) + " partitions, prefix " + strconv.Quote(prefix),
		Engine:      "cluster",
		Partitions:  partitions,
		Prefix:      prefix,
	}
}

func config(run Runner, app string, ours shardcast.LayoutRecord, ev *events) Config {
	c := Config{
		Agreement: shardcast.Agreement{App: app, Heartbeat: time.Hour}.WithDefaults(),
		Run:       run,
		Where:     "test redis",
		Ours:      ours,
		Timeout:   5 * time.Second,
		Log:       slog.New(slog.NewTextHandler(io.Discard, nil)),
		Emit:      func(shardcast.Event) {},
	}
	if ev != nil {
		c.Emit = ev.add
	}
	return c
}

func read(t *testing.T, run Runner, app string) State {
	t.Helper()
	st, err := Read(context.Background(), run, shardcast.Agreement{App: app})
	require.NoError(t, err)
	return st
}

func join(t *testing.T, cfg Config) *Member {
	t.Helper()
	m, err := Join(context.Background(), cfg)
	require.NoError(t, err)
	require.NotNil(t, m)
	return m
}

func requireMismatch(t *testing.T, err error, ours, recorded shardcast.LayoutRecord) *shardcast.LayoutMismatchError {
	t.Helper()
	require.ErrorIs(t, err, shardcast.ErrLayoutMismatch)
	var mm *shardcast.LayoutMismatchError
	require.True(t, errors.As(err, &mm), "error %T: %v", err, err)
	assert.Contains(t, err.Error(), ours.Fingerprint)
	assert.Contains(t, err.Error(), recorded.Fingerprint)
	assert.Contains(t, err.Error(), ours.Description)
	assert.Contains(t, err.Error(), recorded.Description)
	assert.Equal(t, ours, mm.Ours)
	assert.Equal(t, recorded, mm.Recorded, "the error carries the record as Redis holds it")
	return mm
}

// TestJoinProtocol runs the whole life of a record on one Redis: the first
// broker writes it, a second with the same layout joins, a third with
// another is refused and changes nothing, and once the first two left the
// third writes its own.
func TestJoinProtocol(t *testing.T) {
	s := redistest.StartStandalone(t)
	run := runner(t, s.Addr())
	l1, l2 := clusterLayout(t, 128, "app:"), clusterLayout(t, 1024, "app:")

	a := join(t, config(run, "", l1, nil))
	st := read(t, run, "")
	require.NotNil(t, st.Record)
	assert.Equal(t, l1, *st.Record)
	assert.Equal(t, []string{a.ID()}, keys(st.Brokers))
	// The record's raw fields, as other implementations will read them.
	raw, err := s.Do(context.Background(), "HGETALL", "{7lw}:shardcast-layout:record")
	require.NoError(t, err)
	fields := pairs(raw)
	assert.Equal(t, "1", fields["version"])
	assert.Equal(t, a.ID(), fields["written_by"])
	written, err := strconv.ParseInt(fields["written_at"], 10, 64)
	require.NoError(t, err)
	assert.InDelta(t, st.Now.UnixMilli(), written, float64(time.Minute.Milliseconds()), "written_at is server time in ms")
	delete(fields, "written_at")
	assert.Equal(t, map[string]string{
		"version": "1", "fingerprint": l1.Fingerprint, "description": l1.Description, "engine": "cluster",
		"partitions": "128", "prefix": "app:", "written_by": a.ID(),
	}, fields)
	expiry := st.Brokers[a.ID()]
	assert.True(t, expiry.After(st.Now), "the registration expires in the future: %v vs now %v", expiry, st.Now)
	assert.False(t, expiry.After(st.Now.Add(3*time.Hour)), "and no later than 3 heartbeats from now: %v", expiry)

	b := join(t, config(run, "", l1, nil))
	assert.NotEqual(t, a.ID(), b.ID())
	assert.ElementsMatch(t, []string{a.ID(), b.ID()}, keys(read(t, run, "").Brokers))

	_, err = Join(context.Background(), config(run, "", l2, nil))
	mm := requireMismatch(t, err, l2, l1)
	assert.Equal(t, 2, mm.Live)
	assert.ElementsMatch(t, []string{a.ID(), b.ID()}, mm.Brokers)
	assert.Equal(t, "{7lw}:shardcast-layout:record", mm.Key)
	st = read(t, run, "")
	assert.Equal(t, l1, *st.Record, "a refused broker changes nothing")
	assert.ElementsMatch(t, []string{a.ID(), b.ID()}, keys(st.Brokers))

	// Another application on the same Redis keeps its own record.
	other := join(t, config(run, "other:", l2, nil))
	assert.Equal(t, l2, *read(t, run, "other:").Record)
	assert.Equal(t, []string{other.ID()}, keys(read(t, run, "other:").Brokers))

	a.Leave()
	_, err = Join(context.Background(), config(run, "", l2, nil))
	mm = requireMismatch(t, err, l2, l1)
	assert.Equal(t, 1, mm.Live, "one broker of the old layout remains")
	assert.Equal(t, []string{b.ID()}, mm.Brokers)

	b.Leave()
	c := join(t, config(run, "", l2, nil))
	st = read(t, run, "")
	assert.Equal(t, l2, *st.Record, "with no live broker left the new layout replaces the record")
	assert.Equal(t, []string{c.ID()}, keys(st.Brokers))
	_, err = Join(context.Background(), config(run, "", l1, nil))
	requireMismatch(t, err, l1, l2)
	c.Leave()
	other.Leave()
}

// TestExpiredBrokersDoNotCount: a broker that stops heartbeating without
// leaving (a crash) keeps its registration until it expires, then no
// longer holds the record.
func TestExpiredBrokersDoNotCount(t *testing.T) {
	s := redistest.StartStandalone(t)
	run := runner(t, s.Addr())
	l1, l2 := clusterLayout(t, 128, ""), clusterLayout(t, 256, "")
	cfg := config(run, "", l1, nil)
	cfg.Heartbeat = 100 * time.Millisecond
	dead := join(t, cfg)
	dead.Abandon()
	dead.Leave() // does nothing after Abandon, as after a crash

	st := read(t, run, "")
	expiry, ok := st.Brokers[dead.ID()]
	if ok {
		// Still registered: a broker with another layout is refused
		// while the registration lasts, unless it expired meanwhile.
		_, err := Join(context.Background(), config(run, "", l2, nil))
		if err != nil {
			requireMismatch(t, err, l2, l1)
		}
	}
	waitFor(t, "the dead broker's registration to expire", func() bool {
		return !read(t, run, "").Now.Before(expiry)
	})
	m := join(t, config(run, "", l2, nil))
	st = read(t, run, "")
	assert.Equal(t, l2, *st.Record)
	assert.Equal(t, []string{m.ID()}, keys(st.Brokers))
	n, err := s.Do(context.Background(), "ZCARD", "{7lw}:shardcast-layout:brokers")
	require.NoError(t, err)
	assert.EqualValues(t, 1, n, "the join pruned the expired registration")
}

// TestHeartbeatRenews: a live broker stays registered past the lifetime
// of one registration, and a broker with another layout is refused.
func TestHeartbeatRenews(t *testing.T) {
	s := redistest.StartStandalone(t)
	run := runner(t, s.Addr())
	l1, l2 := clusterLayout(t, 128, ""), clusterLayout(t, 16, "")
	cfg := config(run, "", l1, nil)
	cfg.Heartbeat = 50 * time.Millisecond
	m := join(t, cfg)
	first := read(t, run, "").Brokers[m.ID()]
	m.Start(context.Background(), goroutine)
	defer m.Leave()

	waitFor(t, "a renewal seen after the first registration's expiry", func() bool {
		st := read(t, run, "")
		exp, ok := st.Brokers[m.ID()]
		return ok && st.Now.After(first) && exp.After(first)
	})
	// Refused whatever the timing: the heartbeat re-registers the broker
	// even if a stalled beat let it lapse.
	waitFor(t, "a broker with another layout to be refused", func() bool {
		_, err := Join(context.Background(), config(run, "", l2, nil))
		if err != nil {
			requireMismatch(t, err, l2, l1)
		}
		return err != nil
	})
}

// TestHeartbeatRewritesLostRecord: a Redis that lost its data (restarted
// without persistence) gets the record back at the next heartbeat.
func TestHeartbeatRewritesLostRecord(t *testing.T) {
	s := redistest.StartStandalone(t)
	run := runner(t, s.Addr())
	l1 := clusterLayout(t, 128, "")
	cfg := config(run, "", l1, nil)
	cfg.Heartbeat = 20 * time.Millisecond
	m := join(t, cfg)
	m.Start(context.Background(), goroutine)
	defer m.Leave()

	_, err := s.Do(context.Background(), "FLUSHALL")
	require.NoError(t, err)
	waitFor(t, "the record to be written again", func() bool {
		st := read(t, run, "")
		_, ok := st.Brokers[m.ID()]
		return st.Record != nil && reflect.DeepEqual(*st.Record, l1) && ok
	})
}

// TestHeartbeatReportsReplacedRecord: a broker whose registration lapsed
// (here removed by hand) while another layout took the record hears of it
// at its next heartbeat, as an EventError wrapping ErrLayoutMismatch, and
// does not register again under a record it disagrees with.
func TestHeartbeatReportsReplacedRecord(t *testing.T) {
	s := redistest.StartStandalone(t)
	run := runner(t, s.Addr())
	l1, l2 := clusterLayout(t, 128, ""), clusterLayout(t, 128, "x:")
	var ev events
	cfg := config(run, "", l1, &ev)
	cfg.Heartbeat = 20 * time.Millisecond
	old := join(t, cfg)
	_, err := s.Do(context.Background(), "ZREM", "{7lw}:shardcast-layout:brokers", old.ID())
	require.NoError(t, err)
	newer := join(t, config(run, "", l2, nil))

	old.Start(context.Background(), goroutine)
	defer old.Leave()
	waitFor(t, "the mismatch event", func() bool { return len(ev.all()) > 0 })
	e := ev.all()[0]
	assert.Equal(t, shardcast.EventError, e.Kind)
	requireMismatch(t, e.Err, l1, l2)
	st := read(t, run, "")
	assert.Equal(t, l2, *st.Record)
	assert.Equal(t, []string{newer.ID()}, keys(st.Brokers), "the old broker did not register again")
}

// TestConcurrentFirstJoins: brokers with different layouts that start at
// once on an empty Redis: exactly one layout wins, the others are refused.
func TestConcurrentFirstJoins(t *testing.T) {
	s := redistest.StartStandalone(t)
	run := runner(t, s.Addr())
	counts := shardcast.SupportedPartitions()
	errs := make([]error, len(counts))
	var wg sync.WaitGroup
	for i, n := range counts {
		cfg := config(run, "", clusterLayout(t, n, ""), nil)
		wg.Go(func() { _, errs[i] = Join(context.Background(), cfg) })
	}
	wg.Wait()
	won := -1
	for i, err := range errs {
		if err == nil {
			require.Equal(t, -1, won, "two layouts won: %d and %d partitions", counts[max(won, 0)], counts[i])
			won = i
			continue
		}
		require.ErrorIs(t, err, shardcast.ErrLayoutMismatch)
	}
	require.NotEqual(t, -1, won, "no layout won")
	assert.Equal(t, counts[won], read(t, run, "").Record.Partitions)
}

// TestRedisDown: a Redis that is gone or frozen gives Join an error that
// names the record and where it is, within the timeout, never a
// mismatch; Leave against it returns.
func TestRedisDown(t *testing.T) {
	l1 := clusterLayout(t, 128, "")
	t.Run("killed", func(t *testing.T) {
		s := redistest.StartStandalone(t)
		run := runner(t, s.Addr())
		m := join(t, config(run, "", l1, nil))
		require.NoError(t, s.Kill())
		_, err := Join(context.Background(), config(run, "", l1, nil))
		require.Error(t, err)
		assert.NotErrorIs(t, err, shardcast.ErrLayoutMismatch)
		assert.Contains(t, err.Error(), "{7lw}:shardcast-layout:record on test redis")
		m.Leave()
	})
	t.Run("frozen", func(t *testing.T) {
		s := redistest.StartStandalone(t)
		run := runner(t, s.Addr())
		require.NoError(t, s.Pause())
		defer func() { require.NoError(t, s.Resume()) }()
		cfg := config(run, "", l1, nil)
		cfg.Timeout = 200 * time.Millisecond
		_, err := Join(context.Background(), cfg)
		require.Error(t, err)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Contains(t, err.Error(), "{7lw}:shardcast-layout:record on test redis")
	})
}

// TestOff: with the agreement off, Join touches nothing and the nil
// Member's methods are no-ops.
func TestOff(t *testing.T) {
	cfg := config(func(context.Context, *shardcast.Script, []string, []string) (any, error) {
		t.Fatal("the runner was called")
		return nil, nil
	}, "", clusterLayout(t, 128, ""), nil)
	cfg.Off = true
	m, err := Join(context.Background(), cfg)
	require.NoError(t, err)
	require.Nil(t, m)
	m.Start(context.Background(), func(func()) { t.Fatal("a heartbeat started") })
	m.Leave()
	m.Abandon()
	assert.Empty(t, m.ID())
}

// goroutine runs f on a new goroutine; Leave waits for it.
func goroutine(f func()) { go f() }

func keys(m map[string]time.Time) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
