package engine

import (
	"fmt"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/pool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// plDeadline bounds every wait in these tests; far above what any
// condition needs, it only fires when something is stuck.
const plDeadline = 20 * time.Second

// plEvents collects the events a ledger emits and lets a test wait for a
// condition on them without sleeping.
type plEvents struct {
	mu     sync.Mutex
	events []shardcast.Event
	notify chan struct{}
}

func newPlEvents() *plEvents { return &plEvents{notify: make(chan struct{}, 1)} }

func (c *plEvents) emit(ev shardcast.Event) {
	c.mu.Lock()
	c.events = append(c.events, ev)
	c.mu.Unlock()
	select {
	case c.notify <- struct{}{}:
	default:
	}
}

func (c *plEvents) snapshot() []shardcast.Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]shardcast.Event(nil), c.events...)
}

// waitFor blocks until cond holds for the events collected so far.
func (c *plEvents) waitFor(t *testing.T, what string, cond func([]shardcast.Event) bool) []shardcast.Event {
	t.Helper()
	deadline := time.After(plDeadline)
	for {
		evs := c.snapshot()
		if cond(evs) {
			return evs
		}
		select {
		case <-c.notify:
		case <-deadline:
			t.Fatalf("timed out waiting for %s; events so far: %v", what, evs)
		}
	}
}

// plDropTotals sums Count and unions Channels over the EventDropped events.
func plDropTotals(evs []shardcast.Event) (count uint64, channels map[string]int) {
	channels = map[string]int{}
	for _, ev := range evs {
		if ev.Kind != shardcast.EventDropped {
			continue
		}
		count += ev.Count
		for _, ch := range ev.Channels {
			channels[ch]++
		}
	}
	return count, channels
}

// plPool is a worker pool whose losses go to a ledger, as a Core's do.
type plPool struct {
	*pool.Pool
	l *ledger
}

// newPlPool starts a pool of one worker with a queue of queueSize and
// handler, whose losses the ledger reports to events every interval.
func newPlPool(queueSize int, handler func(pool.Message), emit func(shardcast.Event), interval time.Duration) *plPool {
	l := newLedger(emit, nil)
	l.pool.interval = interval
	return &plPool{Pool: pool.New(pool.Config{Workers: 1, QueueSize: queueSize, Handler: handler, Losses: &l.pool}), l: l}
}

// Close closes the pool, then reports what the ledger holds, in Core.Close's order.
func (p *plPool) Close() {
	p.Pool.Close()
	p.l.closePool()
}

// plBlockedPool returns a plPool whose handler is stuck in its first
// message until release is called, with the queue already full, so every
// further Submit drops.
func plBlockedPool(t *testing.T, queueSize int, events *plEvents, interval time.Duration) (p *plPool, release func()) {
	t.Helper()
	gate := make(chan struct{})
	entered := make(chan struct{}, 1)
	p = newPlPool(queueSize, func(pool.Message) {
		select {
		case entered <- struct{}{}:
		default:
		}
		<-gate
	}, events.emit, interval)
	require.True(t, p.Submit(pool.Message{Channel: "first"}))
	select {
	case <-entered:
	case <-time.After(plDeadline):
		t.Fatal("handler never started")
	}
	for i := range queueSize {
		require.True(t, p.Submit(pool.Message{Channel: fmt.Sprintf("queued-%d", i)}))
	}
	var once sync.Once
	return p, func() { once.Do(func() { close(gate) }) }
}

func TestPoolDropsReported(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	events := newPlEvents()
	p, release := plBlockedPool(t, 2, events, poolReportInterval)
	defer p.Close()
	defer release()

	before := time.Now()
	for i := range 30 {
		require.False(t, p.Submit(pool.Message{Channel: []string{"a", "b", "c"}[i%3]}))
	}
	require.Equal(t, uint64(30), p.Dropped())

	// The reporter reports on its own, without waiting for Close.
	evs := events.waitFor(t, "30 reported drops", func(evs []shardcast.Event) bool {
		n, _ := plDropTotals(evs)
		return n >= 30
	})
	count, channels := plDropTotals(evs)
	assert.Equal(t, uint64(30), count)
	assert.Len(t, channels, 3)
	for _, ch := range []string{"a", "b", "c"} {
		assert.Contains(t, channels, ch)
	}
	for _, ev := range evs {
		assert.Equal(t, shardcast.EventDropped, ev.Kind)
		assert.False(t, ev.Truncated)
		assert.False(t, ev.Since.Before(before), "Since is the first drop's time")
		assert.False(t, ev.Until.Before(ev.Since), "Until is not before Since")
		assert.LessOrEqual(t, len(ev.Channels), 3, "channels are listed once per event")
	}

	// A second burst after the first was reported opens a new window.
	for range 5 {
		require.False(t, p.Submit(pool.Message{Channel: "d"}))
	}
	evs = events.waitFor(t, "the second burst", func(evs []shardcast.Event) bool {
		n, _ := plDropTotals(evs)
		return n >= 35
	})
	count, channels = plDropTotals(evs)
	assert.Equal(t, uint64(35), count)
	assert.Equal(t, 1, channels["d"])

	release()
	p.Close()
	assert.Equal(t, uint64(3), p.Delivered(), "the in-flight and the two queued messages")
	count, _ = plDropTotals(events.snapshot())
	assert.Equal(t, uint64(35), count, "no drop is reported twice")
}

func TestPoolDatesAHeldDropFromItsArrival(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	events := newPlEvents()
	p, release := plBlockedPool(t, 1, events, time.Hour)
	defer p.Close()
	defer release()

	// A message dropped as it is handed over after a wait of seconds (a
	// re-layout's hand-over) is reported from when it came, not from the
	// drop: a window from the drop would not cover it.
	before := time.Now()
	arrived := before.Add(-5 * time.Second)
	require.False(t, p.SubmitHeld("plain", []byte("x"), time.Time{}, time.Time{}))
	require.False(t, p.SubmitHeld("held", []byte("x"), time.Time{}, arrived))
	// A later arrival does not move the window's start back up.
	require.False(t, p.SubmitHeld("late", []byte("x"), time.Time{}, time.Now()))
	release()
	p.Close()

	evs := events.snapshot()
	require.Len(t, evs, 1, "one window for the three drops")
	ev := evs[0]
	assert.Equal(t, shardcast.EventDropped, ev.Kind)
	assert.Equal(t, uint64(3), ev.Count)
	assert.ElementsMatch(t, []string{"plain", "held", "late"}, ev.Channels)
	assert.True(t, ev.Since.Equal(arrived), "Since %v is the held message's arrival %v", ev.Since, arrived)
	assert.False(t, ev.Until.Before(before), "Until is the report time")

	// Without a held message, a window begins at its first drop.
	events2 := newPlEvents()
	pool2, release2 := plBlockedPool(t, 1, events2, time.Hour)
	defer pool2.Close()
	defer release2()
	before = time.Now()
	require.False(t, pool2.SubmitHeld("plain", []byte("x"), time.Time{}, time.Time{}))
	release2()
	pool2.Close()
	evs = events2.snapshot()
	require.Len(t, evs, 1)
	assert.False(t, evs[0].Since.Before(before), "a zero arrival: Since is the drop")
}

func TestPoolDropsAggregated(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	events := newPlEvents()
	// An interval no test will reach: only Close can report, so the
	// aggregation into one event is certain rather than likely.
	p, release := plBlockedPool(t, 1, events, time.Hour)

	const distinct, repeats = 1500, 3
	for range repeats {
		for i := range distinct {
			require.False(t, p.Submit(pool.Message{Channel: fmt.Sprintf("ch-%04d", i)}))
		}
	}
	assert.Empty(t, events.snapshot(), "nothing is reported before the interval or Close")

	release()
	p.Close()

	evs := events.snapshot()
	require.Len(t, evs, 1, "one aggregated event")
	ev := evs[0]
	assert.Equal(t, shardcast.EventDropped, ev.Kind)
	assert.Equal(t, uint64(distinct*repeats), ev.Count)
	assert.True(t, ev.Truncated)
	require.Len(t, ev.Channels, maxPoolChannels)
	sorted := append([]string(nil), ev.Channels...)
	sort.Strings(sorted)
	for i := 1; i < len(sorted); i++ {
		require.NotEqual(t, sorted[i-1], sorted[i], "channels are distinct")
	}
	assert.Equal(t, "ch-0000", ev.Channels[0], "channels keep first-drop order")
	assert.False(t, ev.Until.Before(ev.Since))
}

// TestPoolDropRacingCloseIsReported: a drop counted while Close
// runs is in the events the pool reports, so that Dropped and the
// shardcast.EventDropped counts agree after Close (a drop counted after Close's last
// report would never be reported).
func TestPoolDropRacingCloseIsReported(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	for iter := range 100 {
		var mu sync.Mutex
		var reported uint64
		emit := func(ev shardcast.Event) {
			if ev.Kind == shardcast.EventDropped {
				mu.Lock()
				reported += ev.Count
				mu.Unlock()
			}
		}
		p := newPlPool(1, func(pool.Message) {}, emit, time.Hour)
		var stop atomic.Bool
		var wg sync.WaitGroup
		for g := range 3 {
			wg.Go(func() {
				m := pool.Message{Channel: fmt.Sprint("c", g)}
				for !stop.Load() {
					p.Submit(m)
				}
			})
		}
		for range 50 + iter%100 {
			runtime.Gosched()
		}
		p.Close()
		stop.Store(true)
		wg.Wait()
		mu.Lock()
		got := reported
		mu.Unlock()
		require.Equal(t, p.Dropped(), got, "round %d: drops counted and drops reported", iter)
	}
}

// TestPoolDropWindowNeverEndsBeforeItBegins: the reporter's flush, racing
// drops that open a window, never emits an EventDropped whose Until is before its
// Since.
func TestPoolDropWindowNeverEndsBeforeItBegins(t *testing.T) {
	var mu sync.Mutex
	var inverted int
	l := newLedger(func(ev shardcast.Event) {
		if ev.Until.Before(ev.Since) {
			mu.Lock()
			inverted++
			mu.Unlock()
		}
	}, nil)
	l.pool.interval = time.Hour
	defer l.closePool()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
				l.pool.Dropped("c", time.Time{})
			}
		}
	}()
	for range 300000 {
		l.pool.flush()
	}
	close(stop)
	<-done
	mu.Lock()
	defer mu.Unlock()
	assert.Zero(t, inverted)
}

// TestPoolPanicReported: handler panics are reported as one EventError
// per window, its Err wrapping ErrHandlerPanic with the first panic's
// value and the handler's stack.
func TestPoolPanicReported(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	events := newPlEvents()
	p := newPlPool(16, func(m pool.Message) {
		if strings.HasPrefix(m.Channel, "bad") {
			panic("boom " + m.Channel)
		}
	}, events.emit, time.Hour)
	for _, ch := range []string{"bad-1", "good", "bad-2", "bad-1"} {
		require.True(t, p.Submit(pool.Message{Channel: ch}))
	}
	p.Close()

	evs := events.snapshot()
	require.Len(t, evs, 1, "one window, reported at close")
	ev := evs[0]
	assert.Equal(t, shardcast.EventError, ev.Kind)
	assert.Equal(t, uint64(3), ev.Count)
	assert.Equal(t, []string{"bad-1", "bad-2"}, ev.Channels)
	require.ErrorIs(t, ev.Err, shardcast.ErrHandlerPanic)
	assert.Contains(t, ev.Err.Error(), "boom bad-1", "the first panic's value")
	assert.Contains(t, ev.Err.Error(), "pool_losses_test.go", "the handler's stack")
	assert.Equal(t, uint64(3), p.Panics())
}
