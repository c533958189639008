package hist

import (
	"math"
	"math/bits"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLayoutConstants derives the layout's constants from
// Min and Max, so changing either cannot leave them stale.
func TestLayoutConstants(t *testing.T) {
	exp := bits.Len64(uint64(Min)) - 1
	assert.Equal(t, MinExp, exp)
	assert.Equal(t, MinSub, int(uint64(Min)>>(exp-SubBits)))
	assert.Equal(t, Buckets, Index(int64(Max)-1)+2, "regular buckets + underflow + overflow")
}

// TestHistogramBucketEdges pins the bucket of durations at and around the
// layout's edges.
func TestHistogramBucketEdges(t *testing.T) {
	last := Buckets - 1
	for _, tc := range []struct {
		d    time.Duration
		want int
	}{
		{0, 0},
		{1, 0},
		{Min - 1, 0},
		{Min, 1},
		{10239, 1}, // the first bucket is [10000, 10240): 39·256 is below the minimum
		{10240, 2},
		{16383, 25},
		{16384, 26}, // 2^14 opens a power of two
		{16384 + 511, 26},
		{16384 + 512, 27},
		{Max - 1, last - 1},
		{Max, last},
		{time.Hour, last},
		{math.MaxInt64, last},
	} {
		got := Index(int64(tc.d))
		assert.Equal(t, tc.want, got, "bucket of %d ns", int64(tc.d))
		lo, hi := Bounds(got)
		assert.True(t, lo <= tc.d && (tc.d < hi || got == last), "%d ns outside its bucket [%d, %d)", int64(tc.d), lo, hi)
	}
}

// TestHistogramBucketsTile: the buckets cover [0, +Inf) with no gap and
// no overlap, each regular one at most 3.2% as wide as its lower bound, and
// every bucket's bounds map back to it.
func TestHistogramBucketsTile(t *testing.T) {
	var prevUpper time.Duration
	worst := 0.0
	for i := range Buckets {
		lo, hi := Bounds(i)
		require.Equal(t, prevUpper, lo, "bucket %d starts where %d ended", i, i-1)
		require.Less(t, lo, hi, "bucket %d is empty", i)
		require.Equal(t, i, Index(int64(lo)), "lower bound of bucket %d", i)
		if i > 0 && i < Buckets-1 {
			require.Equal(t, i, Index(int64(hi)-1), "last duration of bucket %d", i)
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
	lo, hi := math.Log(float64(Min)), math.Log(float64(Max))
	for range 100_000 {
		d := time.Duration(math.Exp(lo + r.Float64()*(hi-lo)))
		if d >= Max {
			continue
		}
		bl, bu := Bounds(Index(int64(d)))
		require.True(t, bl <= d && d < bu, "%v outside [%v, %v)", d, bl, bu)
		require.LessOrEqual(t, float64(bu-bl)/float64(d), 0.032, "bucket of %v is [%v, %v)", d, bl, bu)
	}
}

// TestHistogramConcurrentRecord: Records from many goroutines lose
// nothing (run with -race).
func TestHistogramConcurrentRecord(t *testing.T) {
	const goroutines, each = 8, 5000
	var h Histogram
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
	var h Histogram
	d := 3 * time.Millisecond
	assert.Zero(t, testing.AllocsPerRun(1000, func() {
		h.Record(d)
		h.Record(-d)
	}))
}

// BenchmarkHistogramRecord measures one Record from one goroutine.
func BenchmarkHistogramRecord(b *testing.B) {
	var h Histogram
	b.ReportAllocs()
	for i := range b.N {
		h.Record(time.Duration(i&0xffff) * time.Microsecond)
	}
}

// TestHistogramRecordOwned: the single-writer path counts exactly what
// Record counts, negative durations and both ends of the range included,
// and a snapshot taken while the owner records (run with -race) is safe.
func TestHistogramRecordOwned(t *testing.T) {
	var shared, owned Histogram
	r := rand.New(rand.NewPCG(7, 7))
	durations := []time.Duration{-time.Second, -1, 0, Min - 1, Min, Max, Max + time.Hour}
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
		owned.RecordOwned(d)
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
		Min, Min, Min, time.Millisecond, Max, time.Hour}
	for i := range 40 { // more than tallySize, in runs
		ds = append(ds, time.Duration(1+i/3)*100*time.Microsecond)
	}
	var want, got Histogram
	var tally Tally
	for _, d := range ds[:5] {
		want.Record(d)
		tally.Record(&got, d)
	}
	snap := got.Snapshot()
	assert.Zero(t, snap.Count, "gathered, not flushed")
	assert.EqualValues(t, 1, snap.Negative)
	for _, d := range ds[5:] {
		want.Record(d)
		tally.Record(&got, d)
	}
	tally.Flush(&got)
	tally.Flush(&got) // an empty flush adds nothing
	assert.Equal(t, want.Snapshot(), got.Snapshot())
}

// TestHistogramSumBounded: lags of years (a publisher's clock unset or
// far off) count as Max in the sums, on every recording path, so
// the sums neither wrap after a few such messages nor go negative; sums
// that would pass the int64 bounds stay at them.
func TestHistogramSumBounded(t *testing.T) {
	const far = 25 * 365 * 24 * time.Hour
	var atomicH, owned, tallied Histogram
	var tally Tally
	for range 100 {
		atomicH.Record(far)
		atomicH.Record(-10 * far)
		owned.RecordOwned(far)
		owned.RecordOwned(-10 * far)
		tally.Record(&tallied, far)
	}
	tally.Flush(&tallied)
	for name, h := range map[string]*Histogram{"atomic": &atomicH, "owned": &owned, "tally": &tallied} {
		s := h.Snapshot()
		assert.Equal(t, 100*Max, s.Sum, name)
		assert.Equal(t, uint64(100), s.Buckets[len(s.Buckets)-1].Count, "%s: in the overflow bucket", name)
		if name != "tally" {
			assert.Equal(t, -100*Max, s.NegativeSum, name)
		}
	}

	assert.Equal(t, int64(math.MaxInt64), SatAdd(math.MaxInt64, 1))
	assert.Equal(t, int64(math.MinInt64), SatAdd(math.MinInt64, -1))
	assert.Equal(t, int64(3), SatAdd(1, 2))
}

// BenchmarkTallyRecord measures a worker's recording of one lag: Record
// into a Tally, flushed every 8 records (a worker flushes at least every
// lagEvery calls), the lags a few µs apart as in a busy batch.
func BenchmarkTallyRecord(b *testing.B) {
	var h Histogram
	var t Tally
	b.ReportAllocs()
	for i := range b.N {
		t.Record(&h, time.Duration(50_000+i&0x3ff))
		if i&7 == 7 {
			t.Flush(&h)
		}
	}
	t.Flush(&h)
}
