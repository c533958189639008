package shardcastprom_test

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/shardcast/shardcast"
	shardcastprom "github.com/shardcast/shardcast/contrib/prometheus"
)

// fakeBroker serves fixed stats, for what a live broker cannot be made to
// show on demand: clock skew, huge durations, odd node lists.
type fakeBroker struct {
	stats      shardcast.Stats
	latency    shardcast.LatencyStats
	nodes      []shardcast.NodeStats
	partitions []shardcast.PartitionStats
}

func (f *fakeBroker) Stats() shardcast.Stats                     { return f.stats }
func (f *fakeBroker) Latency() shardcast.LatencyStats            { return f.latency }
func (f *fakeBroker) NodeStats() []shardcast.NodeStats           { return f.nodes }
func (f *fakeBroker) PartitionStats() []shardcast.PartitionStats { return f.partitions }

// statsOnly has Stats and nothing else, as a future engine might.
type statsOnly struct{}

func (statsOnly) Stats() shardcast.Stats { return shardcast.Stats{Published: 3} }

func TestDefaultBucketsAreExact(t *testing.T) {
	bounds := shardcastprom.DefaultBuckets()
	if len(bounds) != 24 || bounds[0] != shardcast.HistogramMin.Seconds() || bounds[len(bounds)-1] != shardcast.HistogramMax.Seconds() {
		t.Fatalf("DefaultBuckets = %v", bounds)
	}
	// Each default bound is a bound of the broker's buckets: a duration
	// just below it is counted at it, one at it is not.
	var below, at shardcast.HistogramSnapshot
	for _, b := range bounds {
		d := time.Duration(math.Round(b * 1e9))
		below.Record(d - 1)
		at.Record(d)
	}
	f := &fakeBroker{latency: shardcast.LatencyStats{Lag: below, HandlerTime: at}}
	mfs := gather(t, shardcastprom.NewCollector(f, shardcastprom.Options{}))
	for name, shift := range map[string]int{"shardcast_lag_seconds": 1, "shardcast_handler_seconds": 0} {
		h := mfs[name].GetMetric()[0].GetHistogram()
		for i, bk := range h.GetBucket() {
			if want := uint64(i + shift); bk.GetCumulativeCount() != want {
				t.Errorf("%s le=%v: %d, want %d", name, bk.GetUpperBound(), bk.GetCumulativeCount(), want)
			}
		}
		if h.GetSampleCount() != uint64(len(bounds)) {
			t.Errorf("%s count = %d", name, h.GetSampleCount())
		}
	}
}

func TestConfiguredBuckets(t *testing.T) {
	var h shardcast.HistogramSnapshot
	for _, d := range []time.Duration{time.Millisecond, 20 * time.Millisecond, 2 * time.Second, 2 * time.Minute} {
		h.Record(d)
	}
	f := &fakeBroker{latency: shardcast.LatencyStats{Lag: h}}
	// Unsorted, duplicated and invalid bounds are cleaned up, not panicked on.
	c := shardcastprom.NewCollector(f, shardcastprom.Options{Buckets: []float64{1, 0.01, -1, 0.01, math.Inf(1), math.NaN(), 0.1}})
	mfs := gather(t, c)
	var got []uint64
	var les []float64
	for _, bk := range mfs["shardcast_lag_seconds"].GetMetric()[0].GetHistogram().GetBucket() {
		les = append(les, bk.GetUpperBound())
		got = append(got, bk.GetCumulativeCount())
	}
	if !slices.Equal(les, []float64{0.01, 0.1, 1}) || !slices.Equal(got, []uint64{1, 2, 2}) {
		t.Errorf("buckets le=%v counts=%v, want le=[0.01 0.1 1] counts=[1 2 2]", les, got)
	}
}

func TestNegativeLag(t *testing.T) {
	var h shardcast.HistogramSnapshot
	h.Record(-3 * time.Millisecond)
	h.Record(-time.Millisecond)
	h.Record(time.Millisecond)
	f := &fakeBroker{latency: shardcast.LatencyStats{Lag: h}}
	mfs := gather(t, shardcastprom.NewCollector(f, shardcastprom.Options{NativeHistograms: true}))
	if got := value(t, mfs, "shardcast_lag_negative_total"); got != 2 {
		t.Errorf("negative = %v, want 2", got)
	}
	if got := value(t, mfs, "shardcast_lag_negative_seconds_total"); math.Abs(got-0.004) > 1e-12 {
		t.Errorf("negative seconds = %v, want 0.004", got)
	}
	if got := value(t, mfs, "shardcast_lag_seconds"); got != 1 {
		t.Errorf("lag count = %v, want 1 (negatives apart)", got)
	}
}

func TestNativeBucketsPlaceEveryDuration(t *testing.T) {
	var h shardcast.HistogramSnapshot
	ds := []time.Duration{time.Microsecond, 9 * time.Microsecond, 50 * time.Microsecond, time.Millisecond,
		time.Second, 59 * time.Second, time.Hour}
	for _, d := range ds {
		h.Record(d)
	}
	f := &fakeBroker{latency: shardcast.LatencyStats{Lag: h}}
	mfs := gather(t, shardcastprom.NewCollector(f, shardcastprom.Options{NativeHistograms: true}))
	m := mfs["shardcast_lag_seconds"].GetMetric()[0].GetHistogram()
	if m.GetZeroCount() != 2 || m.GetZeroThreshold() != shardcast.HistogramMin.Seconds() {
		t.Errorf("zero bucket %d (threshold %v), want 2 below 10µs", m.GetZeroCount(), m.GetZeroThreshold())
	}
	// Walk the spans: each recorded duration (but the overflow one, put
	// at HistogramMax) lies in its native bucket give or take one source
	// bucket width.
	var bounds []float64
	idx := 0
	var count int64
	deltas := m.GetPositiveDelta()
	for _, sp := range m.GetPositiveSpan() {
		idx += int(sp.GetOffset())
		for range sp.GetLength() {
			count += deltas[0]
			deltas = deltas[1:]
			if count > 0 {
				bounds = append(bounds, math.Pow(2, float64(idx)/8))
			}
			idx++
		}
	}
	want := []float64{50e-6, 1e-3, 1, 59, 60}
	if len(bounds) != len(want) {
		t.Fatalf("native upper bounds %v, want one for each of %v", bounds, want)
	}
	for i, up := range bounds {
		lo := up / math.Pow(2, 1.0/8)
		if want[i] < lo*0.97 || want[i] > up*1.03 {
			t.Errorf("%v s in native bucket (%v, %v]", want[i], lo, up)
		}
	}
}

func TestOptionalInterfaces(t *testing.T) {
	c := shardcastprom.NewCollector(statsOnly{}, shardcastprom.Options{Partitions: true})
	mfs := gather(t, c)
	if len(mfs) != 10 {
		names := make([]string, 0, len(mfs))
		for n := range mfs {
			names = append(names, n)
		}
		t.Errorf("families %v, want the 10 of Stats", names)
	}
	if got := testutil.ToFloat64(filteredName(c, "shardcast_published_total")); got != 3 {
		t.Errorf("published = %v", got)
	}
	// A nil broker exports nothing and panics on nothing.
	if n := testutil.CollectAndCount(shardcastprom.NewCollector(nil, shardcastprom.Options{})); n != 0 {
		t.Errorf("nil broker: %d metrics", n)
	}
}

func TestOmitNodesAndDuplicateAddrs(t *testing.T) {
	f := &fakeBroker{nodes: []shardcast.NodeStats{
		{Addr: "a:1", Received: 2, Down: time.Second},
		{Addr: "b:1", Received: 5},
		{Addr: "a:1", Received: 3, Down: time.Second},
	}, partitions: []shardcast.PartitionStats{{Partition: 0, Master: "a:1", Channels: 2}, {Partition: 1, Channels: 1}}}
	mfs := gather(t, shardcastprom.NewCollector(f, shardcastprom.Options{Partitions: true}))
	if got := value(t, mfs, "shardcast_node_received_total", "node", "a:1"); got != 5 {
		t.Errorf("a:1 received = %v, want 5 (two entries added)", got)
	}
	if got := value(t, mfs, "shardcast_node_down_seconds_total", "node", "a:1"); got != 2 {
		t.Errorf("a:1 down = %v, want 2", got)
	}
	// Partition 1 has no master: no info series for it.
	if n := len(mfs["shardcast_partition_info"].GetMetric()); n != 1 {
		t.Errorf("partition_info has %d series, want 1", n)
	}
	if n := testutil.CollectAndCount(shardcastprom.NewCollector(f, shardcastprom.Options{OmitNodes: true}), "shardcast_node_received_total"); n != 0 {
		t.Errorf("OmitNodes: %d node series", n)
	}
}

func TestEvents(t *testing.T) {
	var events shardcastprom.Events
	hook := events.Chain(nil)
	hook(shardcast.Event{Kind: shardcast.EventDropped, Count: 7})
	hook(shardcast.Event{Kind: shardcast.EventDropped})
	events.OnEvent(shardcast.Event{Kind: shardcast.EventKind(42)})
	c := shardcastprom.NewCollector(statsOnly{}, shardcastprom.Options{Events: &events})
	mfs := gather(t, c)
	if got := value(t, mfs, "shardcast_events_total", "kind", "dropped"); got != 2 {
		t.Errorf("dropped events = %v, want 2", got)
	}
	if got := value(t, mfs, "shardcast_events_total", "kind", "EventKind(42)"); got != 1 {
		t.Errorf("unknown kind = %v, want 1", got)
	}
	if n := len(mfs["shardcast_events_total"].GetMetric()); n != 8 {
		t.Errorf("%d kinds, want 8", n)
	}
}

func TestBadConstLabels(t *testing.T) {
	c := shardcastprom.NewCollector(statsOnly{}, shardcastprom.Options{ConstLabels: prometheus.Labels{"__reserved": "x"}})
	if err := prometheus.NewRegistry().Register(c); err == nil || !strings.Contains(err.Error(), "__reserved") {
		t.Errorf("Register = %v, want an error naming the label", err)
	}
	// Collected unregistered, it fails the gather instead of panicking.
	reg := prometheus.NewRegistry()
	reg.MustRegister(unchecked{c})
	if _, err := reg.Gather(); err == nil {
		t.Error("Gather succeeded")
	}
}

// filteredName keeps only the metrics of one family.
func filteredName(c prometheus.Collector, name string) prometheus.Collector {
	return filteredDesc{c, name}
}

type filteredDesc struct {
	prometheus.Collector
	name string
}

func (f filteredDesc) Collect(ch chan<- prometheus.Metric) {
	all := make(chan prometheus.Metric)
	go func() { f.Collector.Collect(all); close(all) }()
	for m := range all {
		if strings.Contains(m.Desc().String(), `"`+f.name+`"`) {
			ch <- m
		}
	}
}

// unchecked hides a collector's descriptors, so that a registry accepts it
// unchecked and meets its metrics only in Gather.
type unchecked struct{ c prometheus.Collector }

func (unchecked) Describe(chan<- *prometheus.Desc)      {}
func (u unchecked) Collect(ch chan<- prometheus.Metric) { u.c.Collect(ch) }
