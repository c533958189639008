package brokertest

import (
	"fmt"
	"os"
	"runtime"
	"runtime/metrics"
	"time"
)

// HeavyEnv names the environment variable that turns on the heavy
// variants of scale tests (any non-empty value): a million channels
// instead of a hundred thousand. They take too long under -race on the
// two-core machines that run the whole suite to be on by default.
const HeavyEnv = "SHARDCAST_HEAVY"

// Channels returns how many channels a scale test subscribes: 100,000, or
// 1,000,000 when HeavyEnv is set.
func Channels() int {
	if os.Getenv(HeavyEnv) != "" {
		return 1_000_000
	}
	return 100_000
}

// Sample returns k items spread evenly over items (all of them when there
// are no more than k).
func Sample(items []string, k int) []string {
	if len(items) <= k {
		return append([]string(nil), items...)
	}
	out := make([]string, 0, k)
	for i := range k {
		out = append(out, items[i*len(items)/k])
	}
	return out
}

// HeapWatch follows the Go heap of the test process from WatchHeap to
// Stop, sampling it every few milliseconds on a goroutine of its own.
type HeapWatch struct {
	before     uint64 // live heap
	allocated  uint64 // cumulative bytes allocated, at the start
	peak       uint64
	stop, done chan struct{}
}

// HeapReport is what a HeapWatch saw, in bytes.
type HeapReport struct {
	// LiveBefore and LiveAfter are the heap after a full collection at
	// WatchHeap and at Stop.
	LiveBefore, LiveAfter uint64
	// Peak is the largest heap sampled in between, garbage not yet
	// collected included.
	Peak uint64
	// Allocated is what the process allocated in between.
	Allocated uint64
}

// heapObjects is the runtime metric of the heap's object bytes, live and
// not yet swept.
const heapObjects = "/memory/classes/heap/objects:bytes"

// WatchHeap collects garbage, records the live heap and starts sampling.
func WatchHeap() *HeapWatch {
	w := &HeapWatch{stop: make(chan struct{}), done: make(chan struct{})}
	w.before, w.allocated = liveHeap()
	w.peak = w.before
	sample := []metrics.Sample{{Name: heapObjects}}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-w.stop:
				return
			case <-tick.C:
			}
			metrics.Read(sample)
			w.peak = max(w.peak, sample[0].Value.Uint64())
		}
	}()
	return w
}

// Stop ends the sampling and reports.
func (w *HeapWatch) Stop() HeapReport {
	close(w.stop)
	<-w.done
	live, allocated := liveHeap()
	return HeapReport{LiveBefore: w.before, LiveAfter: live, Peak: max(w.peak, live), Allocated: allocated - w.allocated}
}

// liveHeap collects garbage and returns the heap left and the bytes
// allocated so far.
func liveHeap() (live, allocated uint64) {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc, m.TotalAlloc
}

// String formats r for a test log, in MiB.
func (r HeapReport) String() string {
	return fmt.Sprintf("live heap %.1f MiB before, %.1f MiB after; peak %.1f MiB; %.1f MiB allocated",
		mib(r.LiveBefore), mib(r.LiveAfter), mib(r.Peak), mib(r.Allocated))
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }
