package shardcastprom

import (
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/shardcast/shardcast"
)

// histogram exports a snapshot as a Prometheus histogram: classic buckets
// at c.bounds, plus a native histogram if c.native. Negative durations are
// in no bucket of the snapshot, so in none here either.
func (c *Collector) histogram(desc *prometheus.Desc, s shardcast.HistogramSnapshot) prometheus.Metric {
	classic, err := prometheus.NewConstHistogram(desc, s.Count, s.Sum.Seconds(), classicBuckets(s, c.bounds, c.boundsNs))
	if err != nil {
		return prometheus.NewInvalidMetric(desc, err)
	}
	if !c.native {
		return classic
	}
	positive, zero := nativeBuckets(s)
	native, err := prometheus.NewConstNativeHistogram(desc, s.Count, s.Sum.Seconds(),
		positive, nil, zero, NativeSchema, shardcast.HistogramMin.Seconds(), time.Time{})
	if err != nil {
		return prometheus.NewInvalidMetric(desc, err)
	}
	return bothHistograms{classic: classic, native: native}
}

// classicBuckets returns the cumulative count at each bound: the counts of
// the snapshot's buckets whose Upper is at most the bound. The snapshot's
// buckets are [Lower, Upper) and Prometheus's are "less than or equal", so
// a duration exactly equal to a bound is counted one bucket late, a
// difference below the snapshot's resolution.
func classicBuckets(s shardcast.HistogramSnapshot, bounds []float64, boundsNs []time.Duration) map[float64]uint64 {
	out := make(map[float64]uint64, len(bounds))
	var cum uint64
	i := 0
	for j, b := range boundsNs {
		for i < len(s.Buckets) && s.Buckets[i].Upper <= b {
			cum += s.Buckets[i].Count
			i++
		}
		out[bounds[j]] = cum
	}
	return out
}

// nativeBuckets maps the snapshot's buckets onto native buckets of schema
// NativeSchema, as Options.NativeHistograms documents: it returns the
// positive buckets' counts by index and the zero bucket's count.
func nativeBuckets(s shardcast.HistogramSnapshot) (positive map[int]int64, zero uint64) {
	positive = make(map[int]int64)
	for _, b := range s.Buckets {
		if b.Count == 0 {
			continue
		}
		var at time.Duration
		switch {
		case b.Upper <= shardcast.HistogramMin:
			zero += b.Count
			continue
		case b.Upper == math.MaxInt64: // overflow: [HistogramMax, +Inf)
			at = b.Lower
		default:
			at = b.Lower + (b.Upper-b.Lower)/2
		}
		positive[nativeIndex(at.Seconds())] += int64(b.Count)
	}
	return positive, zero
}

// nativeIndex returns the index of the native bucket holding v > 0 in
// schema NativeSchema: bucket i is (2^((i-1)/8), 2^(i/8)].
func nativeIndex(v float64) int {
	return int(math.Ceil(math.Log2(v) * (1 << NativeSchema)))
}

// bothHistograms is one histogram written with the classic buckets of
// one const histogram and the native buckets of another, which
// client_golang's const constructors do not combine themselves.
type bothHistograms struct {
	classic, native prometheus.Metric
}

func (h bothHistograms) Desc() *prometheus.Desc { return h.classic.Desc() }

func (h bothHistograms) Write(out *dto.Metric) error {
	if err := h.classic.Write(out); err != nil {
		return err
	}
	var n dto.Metric
	if err := h.native.Write(&n); err != nil {
		return err
	}
	// The classic Write built out.Histogram afresh, so setting its native
	// fields changes no other metric.
	src, dst := n.GetHistogram(), out.GetHistogram()
	if src == nil || dst == nil {
		return nil
	}
	dst.Schema = src.Schema
	dst.ZeroThreshold = src.ZeroThreshold
	dst.ZeroCount = src.ZeroCount
	dst.PositiveSpan = src.PositiveSpan
	dst.PositiveDelta = src.PositiveDelta
	return nil
}
