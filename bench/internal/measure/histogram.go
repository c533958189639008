// Package measure holds the benchmark's instruments: a lock-free latency
// histogram, process CPU time, and Redis INFO counters.
package measure

import (
	"math"
	"math/bits"
	"sync/atomic"
	"time"
)

// Histogram records durations in log-linear buckets (16 per power of two,
// so a reported percentile is within about 6% of the true value). Record
// is safe for concurrent use and allocation-free.
type Histogram struct {
	buckets [64 * subBuckets]atomic.Uint64
	count   atomic.Uint64
}

const subBits = 4
const subBuckets = 1 << subBits

func bucketOf(ns uint64) int {
	if ns < subBuckets {
		return int(ns)
	}
	exp := 63 - bits.LeadingZeros64(ns) // ns >= 16, so exp >= 4
	sub := (ns >> (exp - subBits)) & (subBuckets - 1)
	return (exp-subBits+1)*subBuckets + int(sub)
}

// bucketUpper returns the largest value that lands in bucket i.
func bucketUpper(i int) uint64 {
	if i < subBuckets {
		return uint64(i)
	}
	exp := i/subBuckets + subBits - 1
	sub := uint64(i % subBuckets)
	lo := (uint64(1) << exp) | sub<<(exp-subBits)
	return lo + (uint64(1) << (exp - subBits)) - 1
}

// Record adds one observation; negative durations count as zero.
func (h *Histogram) Record(d time.Duration) {
	ns := uint64(0)
	if d > 0 {
		ns = uint64(d)
	}
	h.buckets[bucketOf(ns)].Add(1)
	h.count.Add(1)
}

// Count returns the number of observations.
func (h *Histogram) Count() uint64 { return h.count.Load() }

// Quantile returns the q-quantile (0 < q <= 1) as the upper bound of its
// bucket, or 0 without observations.
func (h *Histogram) Quantile(q float64) time.Duration {
	total := h.count.Load()
	if total == 0 {
		return 0
	}
	// Nearest rank: the smallest rank r with r/total >= q, i.e.
	// ceil(q·total); the 1e-9 absorbs float error in q·total (0.999·2000
	// must be 1998, not 1999).
	rank := uint64(math.Ceil(q*float64(total) - 1e-9))
	if rank < 1 {
		rank = 1
	}
	var seen uint64
	for i := range h.buckets {
		seen += h.buckets[i].Load()
		if seen >= rank {
			return time.Duration(bucketUpper(i))
		}
	}
	return time.Duration(bucketUpper(len(h.buckets) - 1))
}
