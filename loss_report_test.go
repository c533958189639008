package shardcast

import (
	"fmt"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestWorkerPoolDropsAreCountedAndReported(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	events := newWptEvents()
	pool, release := wptBlockedPool(t, 2, events, lossReportInterval)
	defer pool.Close()
	defer release()

	before := time.Now()
	for i := range 30 {
		require.False(t, pool.Submit(Message{Channel: []string{"a", "b", "c"}[i%3]}))
	}
	require.Equal(t, uint64(30), pool.Dropped())

	// The reporter reports on its own, without waiting for Close.
	evs := events.waitFor(t, "30 reported drops", func(evs []Event) bool {
		n, _ := wptDropTotals(evs)
		return n >= 30
	})
	count, channels := wptDropTotals(evs)
	assert.Equal(t, uint64(30), count)
	assert.Len(t, channels, 3)
	for _, ch := range []string{"a", "b", "c"} {
		assert.Contains(t, channels, ch)
	}
	for _, ev := range evs {
		assert.Equal(t, EventDropped, ev.Kind)
		assert.False(t, ev.Truncated)
		assert.False(t, ev.Since.Before(before), "Since is the first drop's time")
		assert.False(t, ev.Until.Before(ev.Since), "Until is not before Since")
		assert.LessOrEqual(t, len(ev.Channels), 3, "channels are listed once per event")
	}

	// A second burst after the first was reported opens a new window.
	for range 5 {
		require.False(t, pool.Submit(Message{Channel: "d"}))
	}
	evs = events.waitFor(t, "the second burst", func(evs []Event) bool {
		n, _ := wptDropTotals(evs)
		return n >= 35
	})
	count, channels = wptDropTotals(evs)
	assert.Equal(t, uint64(35), count)
	assert.Equal(t, 1, channels["d"])

	release()
	pool.Close()
	assert.Equal(t, uint64(3), pool.Delivered(), "the in-flight and the two queued messages")
	count, _ = wptDropTotals(events.snapshot())
	assert.Equal(t, uint64(35), count, "no drop is reported twice")
}

func TestWorkerPoolDatesAHeldDropFromItsArrival(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	events := newWptEvents()
	pool, release := wptBlockedPool(t, 1, events, time.Hour)
	defer pool.Close()
	defer release()

	// A message dropped as it is handed over after a wait of seconds (a
	// re-layout's hand-over) is reported from when it came, not from the
	// drop: a window from the drop would not cover it.
	before := time.Now()
	arrived := before.Add(-5 * time.Second)
	require.False(t, pool.SubmitCopy("plain", []byte("x"), time.Time{}))
	require.False(t, pool.SubmitHeld("held", []byte("x"), time.Time{}, arrived))
	// A later arrival does not move the window's start back up.
	require.False(t, pool.SubmitHeld("late", []byte("x"), time.Time{}, time.Now()))
	release()
	pool.Close()

	evs := events.snapshot()
	require.Len(t, evs, 1, "one window for the three drops")
	ev := evs[0]
	assert.Equal(t, EventDropped, ev.Kind)
	assert.Equal(t, uint64(3), ev.Count)
	assert.ElementsMatch(t, []string{"plain", "held", "late"}, ev.Channels)
	assert.True(t, ev.Since.Equal(arrived), "Since %v is the held message's arrival %v", ev.Since, arrived)
	assert.False(t, ev.Until.Before(before), "Until is the report time")

	// Without a held message, a window begins at its first drop.
	events2 := newWptEvents()
	pool2, release2 := wptBlockedPool(t, 1, events2, time.Hour)
	defer pool2.Close()
	defer release2()
	before = time.Now()
	require.False(t, pool2.SubmitHeld("plain", []byte("x"), time.Time{}, time.Time{}))
	release2()
	pool2.Close()
	evs = events2.snapshot()
	require.Len(t, evs, 1)
	assert.False(t, evs[0].Since.Before(before), "a zero arrival is SubmitCopy: Since is the drop")
}

func TestWorkerPoolAggregatesDropsAndCloseReportsThem(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	events := newWptEvents()
	// An interval no test will reach: only Close can report, so the
	// aggregation into one event is certain rather than likely.
	pool, release := wptBlockedPool(t, 1, events, time.Hour)

	const distinct, repeats = 1500, 3
	for range repeats {
		for i := range distinct {
			require.False(t, pool.Submit(Message{Channel: fmt.Sprintf("ch-%04d", i)}))
		}
	}
	assert.Empty(t, events.snapshot(), "nothing is reported before the interval or Close")

	release()
	pool.Close()

	evs := events.snapshot()
	require.Len(t, evs, 1, "one aggregated event")
	ev := evs[0]
	assert.Equal(t, EventDropped, ev.Kind)
	assert.Equal(t, uint64(distinct*repeats), ev.Count)
	assert.True(t, ev.Truncated)
	require.Len(t, ev.Channels, maxReportedChannels)
	sorted := append([]string(nil), ev.Channels...)
	sort.Strings(sorted)
	for i := 1; i < len(sorted); i++ {
		require.NotEqual(t, sorted[i-1], sorted[i], "channels are distinct")
	}
	assert.Equal(t, "ch-0000", ev.Channels[0], "channels keep first-drop order")
	assert.False(t, ev.Until.Before(ev.Since))
}

// TestWorkerPoolDropRacingCloseIsReported: a drop counted while Close
// runs is in the events the pool reports, so that Dropped and the
// EventDropped counts agree after Close (a drop counted after Close's last
// report would never be reported).
func TestWorkerPoolDropRacingCloseIsReported(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	for iter := range 100 {
		var mu sync.Mutex
		var reported uint64
		emit := func(ev Event) {
			if ev.Kind == EventDropped {
				mu.Lock()
				reported += ev.Count
				mu.Unlock()
			}
		}
		p := newWorkerPool(1, 1, func(Message) {}, emit, time.Hour, false, false)
		var stop atomic.Bool
		var wg sync.WaitGroup
		for g := range 3 {
			wg.Go(func() {
				m := Message{Channel: fmt.Sprint("c", g)}
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

// TestDropWindowNeverEndsBeforeItBegins: the reporter's flush, racing
// drops that open a window, never emits an EventDropped whose Until is
// before its Since.
func TestDropWindowNeverEndsBeforeItBegins(t *testing.T) {
	var mu sync.Mutex
	var inverted int
	p := newWorkerPool(1, 1, nil, func(ev Event) {
		if ev.Until.Before(ev.Since) {
			mu.Lock()
			inverted++
			mu.Unlock()
		}
	}, time.Hour, false, false)
	defer p.Close()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
				p.drops.add("c", time.Time{}, nil)
			}
		}
	}()
	for range 300000 {
		p.flush()
	}
	close(stop)
	<-done
	mu.Lock()
	defer mu.Unlock()
	assert.Zero(t, inverted)
}
