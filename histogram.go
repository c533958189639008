package shardcast

import (
	"math"
	"math/bits"
	"sync/atomic"
	"time"
)

// The histogram's layout is fixed: every histogram and every snapshot has
// the same buckets, so snapshots merge by adding counts and an exporter
// can declare its buckets once.
//
// Between HistogramMin and HistogramMax each power of two of nanoseconds
// is cut into histSubBuckets equal buckets (log-linear, as HdrHistogram
// does), so a bucket is at most 1/32 ≈ 3.1% as wide as its lower bound:
// any quantile is known to within that.
const (
	// HistogramMin is the lower bound of the first regular bucket; shorter
	// durations (but not negative ones) fall into the underflow bucket.
	HistogramMin = 10 * time.Microsecond
	// HistogramMax is the upper bound of the last regular bucket; longer
	// durations fall into the overflow bucket.
	HistogramMax = 60 * time.Second

	histSubBits    = 5
	histSubBuckets = 1 << histSubBits // per power of two
)

// The layout in numbers, derived from HistogramMin and HistogramMax
// (TestHistogramLayoutConstants checks them): HistogramMin (10,000 ns) is
// sub-bucket 39 of the power of two 2^13; HistogramMax (6e10 ns) lies in
// sub-bucket 55 of 2^35. That makes 25 + 21*32 + 24 = 721 regular buckets,
// plus underflow and overflow.
const (
	histMinExp  = 13
	histMinSub  = 39
	histBuckets = 723
)

// histIndex returns the bucket of a non-negative duration in nanoseconds:
// 0 is the underflow bucket, histBuckets-1 the overflow bucket.
func histIndex(ns int64) int {
	if ns < int64(HistogramMin) {
		return 0
	}
	if ns >= int64(HistogramMax) {
		return histBuckets - 1
	}
	exp := bits.Len64(uint64(ns)) - 1
	sub := int(uint64(ns) >> (exp - histSubBits)) // in [32, 64)
	return 1 + (exp-histMinExp)*histSubBuckets + sub - histMinSub
}

// histBounds returns bucket i's bounds, [lower, upper). The underflow
// bucket starts at 0 and the overflow bucket ends at math.MaxInt64 (read
// it as +Inf).
func histBounds(i int) (lower, upper time.Duration) {
	switch {
	case i <= 0:
		return 0, HistogramMin
	case i >= histBuckets-1:
		return HistogramMax, math.MaxInt64
	}
	k := i - 1 + histMinSub - histSubBuckets
	exp := histMinExp + k/histSubBuckets
	sub := int64(histSubBuckets + k%histSubBuckets)
	lower = time.Duration(sub << (exp - histSubBits))
	upper = time.Duration((sub + 1) << (exp - histSubBits))
	return max(lower, HistogramMin), min(upper, HistogramMax)
}

// histogram counts durations in fixed log-linear buckets (see
// HistogramMin and HistogramMax). Record is lock-free and allocates
// nothing, so it can sit on a per-message path; concurrent Records are
// safe, but writers on different cores contend on its counters, so a hot
// path keeps one histogram per goroutine and merges their snapshots.
//
// Negative durations (a lag across hosts whose clocks disagree) are not
// clamped to zero, which would hide the skew in the first bucket: they are
// counted apart, in HistogramSnapshot.Negative.
//
// The zero value is an empty histogram. A histogram must not be copied
// after first use.
type histogram struct {
	sum         atomic.Int64
	negative    atomic.Uint64
	negativeSum atomic.Int64
	buckets     [histBuckets]atomic.Uint64
}

// Record counts one duration.
func (h *histogram) Record(d time.Duration) {
	if d < 0 {
		h.negative.Add(1)
		addSum(&h.negativeSum, sumPart(int64(d)))
		return
	}
	h.buckets[histIndex(int64(d))].Add(1)
	addSum(&h.sum, sumPart(int64(d)))
}

// sumPart is what a duration of d ns adds to Sum or NegativeSum: d,
// within ±HistogramMax. A lag of years (a publisher whose clock is unset
// or far off) would otherwise wrap the int64 sums within a few messages.
func sumPart(d int64) int64 {
	return max(-int64(HistogramMax), min(d, int64(HistogramMax)))
}

// satAdd returns a+b, held at the int64 bounds instead of wrapping.
func satAdd(a, b int64) int64 {
	switch {
	case b > 0 && a > math.MaxInt64-b:
		return math.MaxInt64
	case b < 0 && a < math.MinInt64-b:
		return math.MinInt64
	}
	return a + b
}

// addSum adds v to the sum at p, saturating (see satAdd).
func addSum(p *atomic.Int64, v int64) {
	for {
		old := p.Load()
		if p.CompareAndSwap(old, satAdd(old, v)) {
			return
		}
	}
}

// recordOwned is Record for a histogram only one goroutine records into
// (a worker's own): it updates the counters with plain loads and stores
// instead of atomic read-modify-writes, which cost a locked instruction
// each. Snapshots may still be taken concurrently; they read atomically.
func (h *histogram) recordOwned(d time.Duration) {
	if d < 0 {
		h.negative.Store(h.negative.Load() + 1)
		h.negativeSum.Store(satAdd(h.negativeSum.Load(), sumPart(int64(d))))
		return
	}
	b := &h.buckets[histIndex(int64(d))]
	b.Store(b.Load() + 1)
	h.sum.Store(satAdd(h.sum.Load(), sumPart(int64(d))))
}

// histTally gathers durations for a histogram only one goroutine records
// into, and adds them with one store per run of equal buckets and one for
// the sum, where recordOwned stores twice per duration: on amd64 an atomic
// store is a locked instruction that drains the store buffer, which made
// the stores most of a worker's cost of recording a lag. Until flush,
// the durations gathered are not in the histogram; at most tallySize of
// them, since record flushes a full tally.
type histTally struct {
	n     int
	sum   int64
	index [tallySize]uint16
}

const tallySize = 16

// record gathers d for h; a negative d goes to h at once (it is rare).
func (t *histTally) record(h *histogram, d time.Duration) {
	if d < 0 {
		h.recordOwned(d)
		return
	}
	if t.n == len(t.index) {
		t.flush(h)
	}
	t.index[t.n] = uint16(histIndex(int64(d)))
	t.n++
	t.sum += sumPart(int64(d)) // at most tallySize × HistogramMax: no overflow
}

// flush adds the gathered durations to h: buckets first, then the sum, as
// Snapshot expects of a Record in progress.
func (t *histTally) flush(h *histogram) {
	for i := 0; i < t.n; {
		j := i + 1
		for j < t.n && t.index[j] == t.index[i] {
			j++
		}
		b := &h.buckets[t.index[i]]
		b.Store(b.Load() + uint64(j-i))
		i = j
	}
	if t.n > 0 {
		h.sum.Store(satAdd(h.sum.Load(), t.sum))
	}
	t.n, t.sum = 0, 0
}

// Snapshot returns the histogram's counts so far. Records that run
// concurrently may be partly included (counted in a bucket, not yet in
// Sum). Count is the sum of the buckets, so the two always agree.
func (h *histogram) Snapshot() HistogramSnapshot {
	var s HistogramSnapshot
	s.addFrom(h)
	return s
}

// HistogramBucket is one bucket of a snapshot: Count durations d with
// Lower <= d < Upper.
type HistogramBucket struct {
	Lower, Upper time.Duration
	Count        uint64
}

// HistogramSnapshot is a histogram's state at one moment, plain data that
// can be kept, merged and exported.
//
// Buckets lists every bucket in ascending order, empty ones included, so
// that every snapshot has the same layout: the underflow bucket [0,
// HistogramMin), the regular buckets, each at most ~3.1% wide, and the
// overflow bucket [HistogramMax, math.MaxInt64), whose upper bound stands
// for +Inf. Counts are per bucket, not cumulative; an exporter with
// cumulative "less than or equal" buckets (Prometheus) sums them in order
// and uses each Upper as the bound (a duration equal to Upper belongs to
// the next bucket, a difference below the resolution), and Count and Sum
// as its own count and sum. The zero HistogramSnapshot (no Buckets) is an
// empty one.
type HistogramSnapshot struct {
	// Count is the number of non-negative durations recorded, the sum of
	// the bucket counts.
	Count uint64
	// Sum is the total of the non-negative durations recorded, each
	// counted as at most HistogramMax (a lag of years, from a publisher
	// whose clock is far off, would otherwise swamp it), held at the
	// largest Duration rather than wrapping.
	Sum time.Duration
	// Negative counts the negative durations recorded; they are in no
	// bucket and not in Count or Sum. For a lag, they mean the publisher's
	// clock is ahead of the subscriber's.
	Negative uint64
	// NegativeSum is the total of the negative durations (zero or less),
	// each counted as at least -HistogramMax and held at the smallest
	// Duration rather than wrapping, so NegativeSum / Negative is their
	// mean when none is beyond HistogramMax.
	NegativeSum time.Duration
	// Buckets holds the counts, as described above.
	Buckets []HistogramBucket
}

func (s *HistogramSnapshot) init() {
	if s.Buckets != nil {
		return
	}
	s.Buckets = make([]HistogramBucket, histBuckets)
	for i := range s.Buckets {
		s.Buckets[i].Lower, s.Buckets[i].Upper = histBounds(i)
	}
}

// addFrom adds h's counts to s.
func (s *HistogramSnapshot) addFrom(h *histogram) {
	s.init()
	s.Sum = time.Duration(satAdd(int64(s.Sum), h.sum.Load()))
	s.Negative += h.negative.Load()
	s.NegativeSum = time.Duration(satAdd(int64(s.NegativeSum), h.negativeSum.Load()))
	for i := range h.buckets {
		n := h.buckets[i].Load()
		s.Buckets[i].Count += n
		s.Count += n
	}
}

// Record counts one duration into s, as the broker's own histograms do;
// it is for code that builds snapshots itself (an exporter's tests, a
// merge of the application's own timings). It is not safe for concurrent
// use.
func (s *HistogramSnapshot) Record(d time.Duration) {
	s.init()
	if d < 0 {
		s.Negative++
		s.NegativeSum = time.Duration(satAdd(int64(s.NegativeSum), sumPart(int64(d))))
		return
	}
	s.Buckets[histIndex(int64(d))].Count++
	s.Count++
	s.Sum = time.Duration(satAdd(int64(s.Sum), sumPart(int64(d))))
}

// Merge adds o's counts to s, as if every duration recorded in o had been
// recorded in s. Either may be the zero snapshot.
func (s *HistogramSnapshot) Merge(o HistogramSnapshot) {
	s.Count += o.Count
	s.Sum = time.Duration(satAdd(int64(s.Sum), int64(o.Sum)))
	s.Negative += o.Negative
	s.NegativeSum = time.Duration(satAdd(int64(s.NegativeSum), int64(o.NegativeSum)))
	if o.Buckets == nil {
		return
	}
	s.init()
	for i := range o.Buckets {
		s.Buckets[i].Count += o.Buckets[i].Count
	}
}

// Mean returns Sum / Count, or 0 for an empty snapshot.
func (s HistogramSnapshot) Mean() time.Duration {
	if s.Count == 0 {
		return 0
	}
	return s.Sum / time.Duration(s.Count)
}

// Quantile returns an estimate of the q-quantile (q in [0, 1]; 0.99 is
// the 99th percentile) of the non-negative durations: it finds the bucket
// holding it and interpolates linearly inside the bucket, so the estimate
// is within one bucket width (~3.1%) of the true value. Below HistogramMin
// it interpolates over [0, HistogramMin); in the overflow bucket it
// returns HistogramMax, a lower bound. An empty snapshot returns 0.
func (s HistogramSnapshot) Quantile(q float64) time.Duration {
	if s.Count == 0 || len(s.Buckets) == 0 {
		return 0
	}
	q = min(max(q, 0), 1)
	// rank is the 1-based position of the wanted duration in sorted order.
	rank := max(uint64(math.Ceil(q*float64(s.Count))), 1)
	var seen uint64
	for i, b := range s.Buckets {
		if b.Count == 0 || seen+b.Count < rank {
			seen += b.Count
			continue
		}
		if i == len(s.Buckets)-1 {
			return b.Lower
		}
		// The bucket's durations are spread evenly over it; the rank-th
		// overall is the k-th of this bucket, at the middle of its slot.
		k := float64(rank - seen)
		frac := (k - 0.5) / float64(b.Count)
		return b.Lower + time.Duration(frac*float64(b.Upper-b.Lower))
	}
	return s.Buckets[len(s.Buckets)-1].Lower
}
