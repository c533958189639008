package shardcast

import (
	"math"
	"time"

	"github.com/shardcast/shardcast/internal/hist"
)

// The histograms' layout is fixed: every histogram and every snapshot has
// the same buckets, so snapshots merge by adding counts and an exporter
// can declare its buckets once.
//
// Between HistogramMin and HistogramMax each power of two of nanoseconds
// is cut into 32 equal buckets (log-linear, as HdrHistogram does), so a
// bucket is at most 1/32 ≈ 3.1% as wide as its lower bound: any quantile
// is known to within that.
const (
	// HistogramMin is the lower bound of the first regular bucket; shorter
	// durations (but not negative ones) fall into the underflow bucket.
	HistogramMin = hist.Min
	// HistogramMax is the upper bound of the last regular bucket; longer
	// durations fall into the overflow bucket.
	HistogramMax = hist.Max
)

// HistogramExportBounds returns HistogramMin, every power of two of
// nanoseconds between it and HistogramMax (16.384µs, 32.768µs, …, 34.36s),
// and HistogramMax, in seconds: 24 bounds, each one a bound of the
// histograms' own buckets, so that counts exported at them are exact. The
// Prometheus and OpenTelemetry exporters (contrib/) default to them.
func HistogramExportBounds() []float64 {
	bounds := []float64{HistogramMin.Seconds()}
	for d := time.Duration(1); d < HistogramMax; d <<= 1 {
		if d > HistogramMin {
			bounds = append(bounds, d.Seconds())
		}
	}
	return append(bounds, HistogramMax.Seconds())
}

// HistogramBucket is one bucket of a snapshot: Count durations d with
// Lower <= d < Upper.
type HistogramBucket = hist.Bucket

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

// init gives s the layout's buckets, unless it has them.
func (s *HistogramSnapshot) init() { (*hist.Snapshot)(s).Init() }

// Record counts one duration into s, as the broker's own histograms do;
// it is for code that builds snapshots itself (an exporter's tests, a
// merge of the application's own timings). It is not safe for concurrent
// use.
func (s *HistogramSnapshot) Record(d time.Duration) {
	s.init()
	if d < 0 {
		s.Negative++
		s.NegativeSum = time.Duration(hist.SatAdd(int64(s.NegativeSum), hist.SumPart(int64(d))))
		return
	}
	s.Buckets[hist.Index(int64(d))].Count++
	s.Count++
	s.Sum = time.Duration(hist.SatAdd(int64(s.Sum), hist.SumPart(int64(d))))
}

// Merge adds o's counts to s, as if every duration recorded in o had been
// recorded in s. Either may be the zero snapshot.
func (s *HistogramSnapshot) Merge(o HistogramSnapshot) {
	s.Count += o.Count
	s.Sum = time.Duration(hist.SatAdd(int64(s.Sum), int64(o.Sum)))
	s.Negative += o.Negative
	s.NegativeSum = time.Duration(hist.SatAdd(int64(s.NegativeSum), int64(o.NegativeSum)))
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
