package shardcast

import (
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestHistogramLayoutConstants derives the layout's constants from
// HistogramMin and HistogramMax, so changing either cannot leave them stale.
func TestHistogramLayoutConstants(t *testing.T) {
	exp := bits.Len64(uint64(HistogramMin)) - 1
	assert.Equal(t, histMinExp, exp)
	assert.Equal(t, histMinSub, int(uint64(HistogramMin)>>(exp-histSubBits)))
	assert.Equal(t, histBuckets, histIndex(int64(HistogramMax)-1)+2, "regular buckets + underflow + overflow")
}

// TestHistogramBucketEdges pins the bucket of durations at and around the
// layout's edges.
func TestHistogramBucketEdges(t *testing.T) {
	last := histBuckets - 1
	for _, tc := range []struct {
		d    time.Duration
		want int
	}{
		{0, 0},
		{1, 0},
		{HistogramMin - 1, 0},
		{HistogramMin, 1},
		{10239, 1}, // the first bucket is [10000, 10240): 39·256 is below the minimum
		{10240, 2},
		{16383, 25},
		{16384, 26}, // 2^14 opens a power of two
		{16384 + 511, 26},
		{16384 + 512, 27},
		{HistogramMax - 1, last - 1},
		{HistogramMax, last},
		{time.Hour, last},
		{math.MaxInt64, last},
	} {
		got := histIndex(int64(tc.d))
		assert.Equal(t, tc.want, got, "bucket of %d ns", int64(tc.d))
		lo, hi := histBounds(got)
		assert.True(t, lo <= tc.d && (tc.d < hi || got == last), "%d ns outside its bucket [%d, %d)", int64(tc.d), lo, hi)
	}
}

// TestHistogramBucketsTile: the buckets cover [0, +Inf) with no gap and
// no overlap, each regular one at most 3.2% as wide as its lower bound, and
// every bucket's bounds map back to it.
func TestHistogramBucketsTile(t *testing.T) {
	var prevUpper time.Duration
	worst := 0.0
	for i := range histBuckets {
		lo, hi := histBounds(i)
		require.Equal(t, prevUpper, lo, "bucket %d starts where %d ended", i, i-1)
		require.Less(t, lo, hi, "bucket %d is empty", i)
		require.Equal(t, i, histIndex(int64(lo)), "lower bound of bucket %d", i)
		if i > 0 && i < histBuckets-1 {
			require.Equal(t, i, histIndex(int64(hi)-1), "last duration of bucket %d", i)
			worst = max(worst, float64(hi-lo)/float64(lo))
		}
		prevUpper = hi
	}
	assert.Equal(t, time.Duration(math.MaxInt64), prevUpper, "the overflow bucket is unbounded")
	assert.LessOrEqual(t, worst, 0.032)
	t.Logf("widest regular bucket: %.2f%% of its lower bound", worst*100)
}

// TestHistogramResolution: for durations spread over the whole range,
// the bucket a duration lands in is within 3.2% of it at either end.
func TestHistogramResolution(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	lo, hi := math.Log(float64(HistogramMin)), math.Log(float64(HistogramMax))
	for range 100_000 {
		d := time.Duration(math.Exp(lo + r.Float64()*(hi-lo)))
		if d >= HistogramMax {
			continue
		}
		bl, bu := histBounds(histIndex(int64(d)))
		require.True(t, bl <= d && d < bu, "%v outside [%v, %v)", d, bl, bu)
		require.LessOrEqual(t, float64(bu-bl)/float64(d), 0.032, "bucket of %v is [%v, %v)", d, bl, bu)
	}
}

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
			var h histogram
			values := make([]time.Duration, 50_000)
			var sum time.Duration
			for i := range values {
				values[i] = tc.draw()
				sum += values[i]
				h.Record(values[i])
			}
			slices.Sort(values)
			s := h.Snapshot()
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
	var h histogram
	h.Record(0)
	h.Record(time.Microsecond)
	h.Record(2 * time.Minute)
	s := h.Snapshot()
	assert.EqualValues(t, 3, s.Count)
	assert.Equal(t, time.Microsecond+HistogramMax, s.Sum)
	assert.EqualValues(t, 2, s.Buckets[0].Count)
	assert.EqualValues(t, 1, s.Buckets[histBuckets-1].Count)
	assert.Less(t, s.Quantile(0.5), HistogramMin)
	assert.Equal(t, HistogramMax, s.Quantile(1), "the overflow bucket answers its lower bound")
}

// TestHistogramNegative: negative durations are counted apart, never in
// a bucket, Count or Sum.
func TestHistogramNegative(t *testing.T) {
	var h histogram
	h.Record(-time.Millisecond)
	h.Record(-3 * time.Millisecond)
	h.Record(time.Millisecond)
	s := h.Snapshot()
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
	var a, b, both histogram
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
	merged.Merge(a.Snapshot())
	merged.Merge(b.Snapshot())
	merged.Merge(HistogramSnapshot{})
	assert.Equal(t, both.Snapshot(), merged)

	var empty HistogramSnapshot
	assert.Zero(t, empty.Quantile(0.5))
	assert.Zero(t, empty.Mean())
}

// TestHistogramConcurrentRecord: Records from many goroutines lose
// nothing (run with -race).
func TestHistogramConcurrentRecord(t *testing.T) {
	const goroutines, each = 8, 5000
	var h histogram
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				h.Record(time.Duration(g*each+i) * time.Microsecond)
				if i%100 == 0 {
					h.Snapshot() // readers run alongside writers
				}
			}
		})
	}
	wg.Wait()
	s := h.Snapshot()
	assert.EqualValues(t, goroutines*each, s.Count)
	n := goroutines * each
	assert.Equal(t, time.Duration(n*(n-1)/2)*time.Microsecond, s.Sum)
}

// TestHistogramRecordAllocatesNothing: Record sits on the per-message path.
func TestHistogramRecordAllocatesNothing(t *testing.T) {
	var h histogram
	d := 3 * time.Millisecond
	assert.Zero(t, testing.AllocsPerRun(1000, func() {
		h.Record(d)
		h.Record(-d)
	}))
}

// BenchmarkHistogramRecord measures one Record from one goroutine.
func BenchmarkHistogramRecord(b *testing.B) {
	var h histogram
	b.ReportAllocs()
	for i := range b.N {
		h.Record(time.Duration(i&0xffff) * time.Microsecond)
	}
}

// TestHistogramRecordOwned: the single-writer path counts exactly what
// Record counts, negative durations and both ends of the range included,
// and a snapshot taken while the owner records (run with -race) is safe.
func TestHistogramRecordOwned(t *testing.T) {
	var shared, owned histogram
	r := rand.New(rand.NewPCG(7, 7))
	durations := []time.Duration{-time.Second, -1, 0, HistogramMin - 1, HistogramMin, HistogramMax, HistogramMax + time.Hour}
	for range 5000 {
		durations = append(durations, time.Duration(r.Int64N(int64(2*time.Minute)))-time.Second)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 100 {
			_ = owned.Snapshot()
		}
	}()
	for _, d := range durations {
		shared.Record(d)
		owned.recordOwned(d)
	}
	<-done
	assert.Equal(t, shared.Snapshot(), owned.Snapshot())
	assert.Equal(t, uint64(len(durations)), owned.Snapshot().Count+owned.Snapshot().Negative)
}

// TestHistTally: durations gathered in a tally and flushed (also by a
// full tally flushing itself) count exactly what Record counts, runs of
// equal buckets, negative durations and both ends of the range included;
// before the flush, only the negative ones are in the histogram.
func TestHistTally(t *testing.T) {
	ds := []time.Duration{0, 5 * time.Microsecond, 5 * time.Microsecond, -time.Second,
		HistogramMin, HistogramMin, HistogramMin, time.Millisecond, HistogramMax, time.Hour}
	for i := range 40 { // more than tallySize, in runs
		ds = append(ds, time.Duration(1+i/3)*100*time.Microsecond)
	}
	var want, got histogram
	var tally histTally
	for _, d := range ds[:5] {
		want.Record(d)
		tally.record(&got, d)
	}
	snap := got.Snapshot()
	assert.Zero(t, snap.Count, "gathered, not flushed")
	assert.EqualValues(t, 1, snap.Negative)
	for _, d := range ds[5:] {
		want.Record(d)
		tally.record(&got, d)
	}
	tally.flush(&got)
	tally.flush(&got) // an empty flush adds nothing
	assert.Equal(t, want.Snapshot(), got.Snapshot())
}

// TestHistogramSumBounded: lags of years (a publisher's clock unset or
// far off) count as HistogramMax in the sums, on every recording path, so
// the sums neither wrap after a few such messages nor go negative; sums
// that would pass the int64 bounds stay at them.
func TestHistogramSumBounded(t *testing.T) {
	const far = 25 * 365 * 24 * time.Hour
	var atomicH, owned, tallied histogram
	var tally histTally
	for range 100 {
		atomicH.Record(far)
		atomicH.Record(-10 * far)
		owned.recordOwned(far)
		owned.recordOwned(-10 * far)
		tally.record(&tallied, far)
	}
	tally.flush(&tallied)
	for name, h := range map[string]*histogram{"atomic": &atomicH, "owned": &owned, "tally": &tallied} {
		s := h.Snapshot()
		assert.Equal(t, 100*HistogramMax, s.Sum, name)
		assert.Equal(t, uint64(100), s.Buckets[len(s.Buckets)-1].Count, "%s: in the overflow bucket", name)
		if name != "tally" {
			assert.Equal(t, -100*HistogramMax, s.NegativeSum, name)
		}
	}

	big := HistogramSnapshot{Sum: math.MaxInt64 - 1, NegativeSum: math.MinInt64 + 1}
	big.Merge(HistogramSnapshot{Sum: time.Hour, NegativeSum: -time.Hour})
	assert.Equal(t, time.Duration(math.MaxInt64), big.Sum, "held at the bound")
	assert.Equal(t, time.Duration(math.MinInt64), big.NegativeSum, "held at the bound")
	assert.Equal(t, int64(math.MaxInt64), satAdd(math.MaxInt64, 1))
	assert.Equal(t, int64(math.MinInt64), satAdd(math.MinInt64, -1))
	assert.Equal(t, int64(3), satAdd(1, 2))
}
