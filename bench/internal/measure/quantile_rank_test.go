package measure

import (
	"testing"
	"time"
)

// TestQuantileIsNearestRank: the q-quantile is the smallest value with at
// least q of the observations at or below it (rank ceil(q·n)). Values
// below 16 ns have exact buckets, so the expected value is exact.
func TestQuantileIsNearestRank(t *testing.T) {
	for _, c := range []struct {
		fast, slow int
		q          float64
		want       time.Duration
	}{
		{158, 2, 0.99, 10},   // 158/160 = 98.75% are fast: p99 is slow
		{1998, 2, 0.999, 1},  // 1998/2000 = 99.9%: p99.9 is fast
		{2997, 3, 0.999, 1},  // exactly 99.9%: fast
		{2996, 4, 0.999, 10}, // 99.867%: slow
		{2, 2, 0.6, 10},      // p60 of {1,1,10,10}
		{1, 1, 0.5, 1},       // median of {1,10} by nearest rank
	} {
		var h Histogram
		for range c.fast {
			h.Record(1)
		}
		for range c.slow {
			h.Record(10)
		}
		if got := h.Quantile(c.q); got != c.want {
			t.Errorf("%d×1ns + %d×10ns: Quantile(%v) = %v, want %v", c.fast, c.slow, c.q, got, c.want)
		}
	}
}
