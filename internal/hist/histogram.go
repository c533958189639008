package hist

import (
	"sync/atomic"
	"time"
)

// Histogram counts durations in the fixed buckets (see Min and Max).
// Record is lock-free and allocates nothing, so it can sit on a
// per-message path; concurrent Records are safe, but writers on different
// cores contend on its counters, so a hot path keeps one histogram per
// goroutine and merges their snapshots.
//
// Negative durations (a lag across hosts whose clocks disagree) are not
// clamped to zero, which would hide the skew in the first bucket: they are
// counted apart.
//
// The zero value is an empty histogram. A Histogram must not be copied
// after first use.
type Histogram struct {
	sum         atomic.Int64
	negative    atomic.Uint64
	negativeSum atomic.Int64
	buckets     [Buckets]atomic.Uint64
}

// Record counts one duration.
func (h *Histogram) Record(d time.Duration) {
	if d < 0 {
		h.negative.Add(1)
		addSum(&h.negativeSum, SumPart(int64(d)))
		return
	}
	h.buckets[Index(int64(d))].Add(1)
	addSum(&h.sum, SumPart(int64(d)))
}

// addSum adds v to the sum at p, saturating (see SatAdd).
func addSum(p *atomic.Int64, v int64) {
	for {
		old := p.Load()
		if p.CompareAndSwap(old, SatAdd(old, v)) {
			return
		}
	}
}

// RecordOwned is Record for a histogram only one goroutine records into
// (a worker's own): it updates the counters with plain loads and stores
// instead of atomic read-modify-writes, which cost a locked instruction
// each. Snapshots may still be taken concurrently; they read atomically.
func (h *Histogram) RecordOwned(d time.Duration) {
	if d < 0 {
		h.negative.Store(h.negative.Load() + 1)
		h.negativeSum.Store(SatAdd(h.negativeSum.Load(), SumPart(int64(d))))
		return
	}
	b := &h.buckets[Index(int64(d))]
	b.Store(b.Load() + 1)
	h.sum.Store(SatAdd(h.sum.Load(), SumPart(int64(d))))
}

// Snapshot returns the histogram's counts so far. Records that run
// concurrently may be partly included (counted in a bucket, not yet in
// Sum). Count is the sum of the buckets, so the two always agree.
func (h *Histogram) Snapshot() Snapshot {
	var s Snapshot
	s.AddFrom(h)
	return s
}
