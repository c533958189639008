package hist

import (
	"math"
	"math/bits"
	"time"
)

// The layout is fixed: every histogram and every snapshot has the same
// buckets, so snapshots merge by adding counts and an exporter can
// declare its buckets once.
//
// Between Min and Max each power of two of nanoseconds is cut into
// SubBuckets equal buckets (log-linear, as HdrHistogram does), so a
// bucket is at most 1/32 ≈ 3.1% as wide as its lower bound: any quantile
// is known to within that.
const (
	// Min is the lower bound of the first regular bucket; shorter
	// durations (but not negative ones) fall into the underflow bucket.
	Min = 10 * time.Microsecond
	// Max is the upper bound of the last regular bucket; longer
	// durations fall into the overflow bucket.
	Max = 60 * time.Second

	// SubBits is log2 of SubBuckets.
	SubBits = 5
	// SubBuckets is the number of buckets per power of two.
	SubBuckets = 1 << SubBits
)

// The layout in numbers, derived from Min and Max (TestLayoutConstants
// checks them): Min (10,000 ns) is sub-bucket 39 of the power of two
// 2^13; Max (6e10 ns) lies in sub-bucket 55 of 2^35. That makes
// 25 + 21*32 + 24 = 721 regular buckets, plus underflow and overflow.
const (
	// MinExp is the power of two Min lies in.
	MinExp = 13
	// MinSub is Min's sub-bucket within 2^MinExp.
	MinSub = 39
	// Buckets is the number of buckets, underflow and overflow included.
	Buckets = 723
)

// Index returns the bucket of a non-negative duration in nanoseconds: 0
// is the underflow bucket, Buckets-1 the overflow bucket.
func Index(ns int64) int {
	if ns < int64(Min) {
		return 0
	}
	if ns >= int64(Max) {
		return Buckets - 1
	}
	exp := bits.Len64(uint64(ns)) - 1
	sub := int(uint64(ns) >> (exp - SubBits)) // in [32, 64)
	return 1 + (exp-MinExp)*SubBuckets + sub - MinSub
}

// Bounds returns bucket i's bounds, [lower, upper). The underflow bucket
// starts at 0 and the overflow bucket ends at math.MaxInt64 (read it as
// +Inf).
func Bounds(i int) (lower, upper time.Duration) {
	switch {
	case i <= 0:
		return 0, Min
	case i >= Buckets-1:
		return Max, math.MaxInt64
	}
	k := i - 1 + MinSub - SubBuckets
	exp := MinExp + k/SubBuckets
	sub := int64(SubBuckets + k%SubBuckets)
	lower = time.Duration(sub << (exp - SubBits))
	upper = time.Duration((sub + 1) << (exp - SubBits))
	return max(lower, Min), min(upper, Max)
}

// SumPart is what a duration of d ns adds to a sum: d, within ±Max. A
// lag of years (a publisher whose clock is unset or far off) would
// otherwise wrap the int64 sums within a few messages.
func SumPart(d int64) int64 {
	return max(-int64(Max), min(d, int64(Max)))
}

// SatAdd returns a+b, held at the int64 bounds instead of wrapping.
func SatAdd(a, b int64) int64 {
	switch {
	case b > 0 && a > math.MaxInt64-b:
		return math.MaxInt64
	case b < 0 && a < math.MinInt64-b:
		return math.MinInt64
	}
	return a + b
}
