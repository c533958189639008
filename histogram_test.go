package shardcast

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/shardcast/shardcast/internal/hist"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestHistogramQuantiles checks quantiles of known distributions against
// the exact ones, to the resolution the layout promises.
func TestHistogramQuantiles(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, tc := range []struct {
		name string
		draw func() time.Duration
	}{
		{"constant 1ms", func() time.Duration { return time.Millisecond }},
		{"uniform 1ms-100ms", func() time.Duration { return time.Millisecond + time.Duration(r.Int64N(int64(99*time.Millisecond))) }},
		{"exponential mean 5ms", func() time.Duration { return HistogramMin + time.Duration(r.ExpFloat64()*float64(5*time.Millisecond)) }},
		{"log-uniform 20µs-30s", func() time.Duration {
			return time.Duration(math.Exp(math.Log(20e3) + r.Float64()*(math.Log(30e9)-math.Log(20e3))))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var h hist.Histogram
			values := make([]time.Duration, 50_000)
			var sum time.Duration
			for i := range values {
				values[i] = tc.draw()
				sum += values[i]
				h.Record(values[i])
			}
			slices.Sort(values)
			s := snapshotOf(&h)
			require.EqualValues(t, len(values), s.Count)
			assert.Equal(t, sum, s.Sum)
			assert.Equal(t, sum/time.Duration(len(values)), s.Mean())
			for _, q := range []float64{0, 0.01, 0.25, 0.5, 0.9, 0.99, 0.999, 1} {
				rank := max(int(math.Ceil(q*float64(len(values)))), 1)
				exact := values[rank-1]
				got := s.Quantile(q)
				assert.InEpsilon(t, float64(exact), float64(got), 0.032, "q=%v: exact %v, estimate %v", q, exact, got)
			}
		})
	}
}

// TestHistogramUnderflowOverflow: durations outside the range are counted
// in the end buckets, in Count and Sum (one past HistogramMax as
// HistogramMax), and quantiles there stay bounded.
func TestHistogramUnderflowOverflow(t *testing.T) {
	var h hist.Histogram
	h.Record(0)
	h.Record(time.Microsecond)
	h.Record(2 * time.Minute)
	s := snapshotOf(&h)
	assert.EqualValues(t, 3, s.Count)
	assert.Equal(t, time.Microsecond+HistogramMax, s.Sum)
	assert.EqualValues(t, 2, s.Buckets[0].Count)
	assert.EqualValues(t, 1, s.Buckets[hist.Buckets-1].Count)
	assert.Less(t, s.Quantile(0.5), HistogramMin)
	assert.Equal(t, HistogramMax, s.Quantile(1), "the overflow bucket answers its lower bound")
}

// TestHistogramNegative: negative durations are counted apart, never in
// a bucket, Count or Sum.
func TestHistogramNegative(t *testing.T) {
	var h hist.Histogram
	h.Record(-time.Millisecond)
	h.Record(-3 * time.Millisecond)
	h.Record(time.Millisecond)
	s := snapshotOf(&h)
	assert.EqualValues(t, 2, s.Negative)
	assert.Equal(t, -4*time.Millisecond, s.NegativeSum)
	assert.EqualValues(t, 1, s.Count)
	assert.Equal(t, time.Millisecond, s.Sum)
	var inBuckets uint64
	for _, b := range s.Buckets {
		inBuckets += b.Count
	}
	assert.EqualValues(t, 1, inBuckets)
	assert.InEpsilon(t, float64(time.Millisecond), float64(s.Quantile(0)), 0.032)
}

// TestHistogramSnapshotMerge: merging snapshots equals recording into one
// histogram, and the zero snapshot is neutral on either side.
func TestHistogramSnapshotMerge(t *testing.T) {
	var a, b, both hist.Histogram
	for i := range 1000 {
		d := time.Duration(i) * 37 * time.Microsecond
		if i%3 == 0 {
			a.Record(d)
		} else {
			b.Record(d)
		}
		both.Record(d)
	}
	a.Record(-time.Second)
	both.Record(-time.Second)

	var merged HistogramSnapshot
	merged.Merge(snapshotOf(&a))
	merged.Merge(snapshotOf(&b))
	merged.Merge(HistogramSnapshot{})
	assert.Equal(t, snapshotOf(&both), merged)

	var empty HistogramSnapshot
	assert.Zero(t, empty.Quantile(0.5))
	assert.Zero(t, empty.Mean())
}

// snapshotOf returns h's counts as the public snapshot.
func snapshotOf(h *hist.Histogram) HistogramSnapshot { return HistogramSnapshot(h.Snapshot()) }

// TestHistogramSnapshotSumsHeld: merged sums that would pass the int64
// bounds stay at them.
func TestHistogramSnapshotSumsHeld(t *testing.T) {
	big := HistogramSnapshot{Sum: math.MaxInt64 - 1, NegativeSum: math.MinInt64 + 1}
	big.Merge(HistogramSnapshot{Sum: time.Hour, NegativeSum: -time.Hour})
	assert.Equal(t, time.Duration(math.MaxInt64), big.Sum, "held at the bound")
	assert.Equal(t, time.Duration(math.MinInt64), big.NegativeSum, "held at the bound")
}

// TestHistogramSnapshotRecord: a snapshot recorded into directly counts
// what the library's histograms count.
func TestHistogramSnapshotRecord(t *testing.T) {
	var h hist.Histogram
	var s HistogramSnapshot
	for _, d := range []time.Duration{-time.Second, 0, time.Millisecond, HistogramMax + time.Hour} {
		h.Record(d)
		s.Record(d)
	}
	assert.Equal(t, snapshotOf(&h), s)
}

// TestHistogramExportBoundsAreBucketBounds: each export bound is the lower
// bound of one of the histograms' own buckets, so counts at it are exact.
func TestHistogramExportBoundsAreBucketBounds(t *testing.T) {
	bounds := HistogramExportBounds()
	if len(bounds) != 24 || bounds[0] != HistogramMin.Seconds() || bounds[len(bounds)-1] != HistogramMax.Seconds() {
		t.Fatalf("HistogramExportBounds() = %v", bounds)
	}
	var s HistogramSnapshot
	s.Record(time.Second) // fills in the layout
	lower := map[time.Duration]bool{}
	for _, b := range s.Buckets {
		lower[b.Lower] = true
	}
	for i, b := range bounds {
		d := time.Duration(math.Round(b * 1e9))
		if !lower[d] {
			t.Errorf("bound %v is not a bucket bound", d)
		}
		if i > 0 && b <= bounds[i-1] {
			t.Errorf("bound %v not above %v", b, bounds[i-1])
		}
	}
}
