package shardcast_test

import (
	"fmt"
	"time"

	"github.com/shardcast/shardcast"
)

// A HistogramSnapshot counts durations (a broker fills one from
// every delivery; see LatencyStats). It answers quantiles to within
// ~3%, and can be walked bucket by bucket by a metrics exporter.
func ExampleHistogramSnapshot() {
	var h shardcast.HistogramSnapshot
	for i := 1; i <= 100; i++ {
		h.Record(time.Duration(i) * time.Millisecond)
	}
	h.Record(-time.Millisecond) // a publisher whose clock is ahead

	s := &h
	fmt.Println("count:", s.Count, "negative:", s.Negative)
	fmt.Println("mean:", s.Mean())
	p99 := s.Quantile(0.99)
	fmt.Println("p99 within 3.2% of 99ms:", p99 > 99*time.Millisecond*968/1000 && p99 < 99*time.Millisecond*1032/1000)

	// An exporter sums buckets in order: here, those ending at or below 10 ms.
	var cumulative uint64
	for _, b := range s.Buckets {
		if b.Upper > 10*time.Millisecond {
			break
		}
		cumulative += b.Count
	}
	fmt.Println("below 10ms:", cumulative)
	// Output:
	// count: 100 negative: 1
	// mean: 50.5ms
	// p99 within 3.2% of 99ms: true
	// below 10ms: 9
}
