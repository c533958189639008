package shardcastotel

import (
	"context"
	"math"
	"slices"
	"sync"

	"github.com/shardcast/shardcast"
	"go.opentelemetry.io/otel/metric"
)

// DefaultBuckets returns the default explicit bucket boundaries, in
// seconds, advised for shardcast.lag.duration and
// shardcast.handler.duration: shardcast.HistogramExportBounds, those of
// the Prometheus collector (contrib/prometheus) too. Each is a bound of
// the broker's own buckets, so their counts are exact.
func DefaultBuckets() []float64 { return shardcast.HistogramExportBounds() }

// normalBuckets sorts, deduplicates and filters bounds as Options.Buckets
// documents.
func normalBuckets(bounds []float64) []float64 {
	if bounds == nil {
		return DefaultBuckets()
	}
	var out []float64
	for _, b := range bounds {
		if b > 0 && !math.IsInf(b, 0) && !math.IsNaN(b) {
			out = append(out, b)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// overflowValue is what a duration of the broker's overflow bucket
// ([HistogramMax, +Inf)) is recorded as: just above HistogramMax, so that
// it lies above a boundary at HistogramMax, as it does in the broker.
var overflowValue = shardcast.HistogramMax.Seconds() + 1e-9

// histogramFeed turns the cumulative snapshots of one broker histogram
// into measurements of an OpenTelemetry histogram: each collection records
// the durations the broker counted since the previous one.
type histogramFeed struct {
	hist metric.Float64Histogram

	mu   sync.Mutex
	prev []uint64 // bucket counts already recorded
}

// record records, into f.hist, every duration of cur that an earlier call
// has not recorded: per bucket, its new count, each at the bucket's
// midpoint. Concurrent calls (two readers collecting at once) record
// disjoint parts.
func (f *histogramFeed) record(ctx context.Context, cur shardcast.HistogramSnapshot, opt metric.RecordOption) {
	delta := f.take(cur)
	for i, n := range delta {
		if n == 0 {
			continue
		}
		v := bucketValue(cur.Buckets[i])
		for range n {
			f.hist.Record(ctx, v, opt)
		}
	}
}

// take returns, per bucket, how far cur's count is above the count
// recorded so far, and raises the recorded counts to cur's. A broker's
// counts never go down, so a count below the recorded one belongs to a
// snapshot older than one already recorded (two collections read the
// broker at once, and the later snapshot got here first): it adds
// nothing.
func (f *histogramFeed) take(cur shardcast.HistogramSnapshot) []uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.prev) < len(cur.Buckets) {
		f.prev = append(f.prev, make([]uint64, len(cur.Buckets)-len(f.prev))...)
	}
	delta := make([]uint64, len(cur.Buckets))
	for i, b := range cur.Buckets {
		if b.Count > f.prev[i] {
			delta[i] = b.Count - f.prev[i]
			f.prev[i] = b.Count
		}
	}
	return delta
}

// bucketValue is the value, in seconds, a duration of bucket b is
// recorded as: the bucket's midpoint, or overflowValue for the overflow
// bucket. A midpoint lies strictly inside its bucket, so a boundary that
// is one of the broker's bucket bounds counts exactly.
func bucketValue(b shardcast.HistogramBucket) float64 {
	if b.Upper == math.MaxInt64 {
		return overflowValue
	}
	return (b.Lower + (b.Upper-b.Lower)/2).Seconds()
}
