package shardcastotel_test

import (
	"context"
	"errors"
	"math"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	shardcastotel "github.com/shardcast/shardcast/contrib/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// fakeBroker serves fixed stats, for what a live broker cannot be made to
// show on demand: clock skew, huge durations, odd node lists, a snapshot
// that changes between two collections.
type fakeBroker struct {
	stats      shardcast.Stats
	latency    shardcast.LatencyStats
	nodes      []shardcast.NodeStats
	partitions []shardcast.PartitionStats
	hot        []shardcast.HotChannel
	reads      atomic.Int64
}

func (f *fakeBroker) Stats() shardcast.Stats                     { f.reads.Add(1); return f.stats }
func (f *fakeBroker) Latency() shardcast.LatencyStats            { return f.latency }
func (f *fakeBroker) NodeStats() []shardcast.NodeStats           { return f.nodes }
func (f *fakeBroker) PartitionStats() []shardcast.PartitionStats { return f.partitions }
func (f *fakeBroker) HotChannels() []shardcast.HotChannel        { return f.hot }

// statsOnly has Stats and nothing else, as a future engine might.
type statsOnly struct{}

func (statsOnly) Stats() shardcast.Stats { return shardcast.Stats{Published: 3} }

func TestDefaultBucketsAreExact(t *testing.T) {
	bounds := shardcastotel.DefaultBuckets()
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
	mp, r := newReader(t)
	register(t, mp, &fakeBroker{latency: shardcast.LatencyStats{Lag: below, HandlerTime: at}}, shardcastotel.Options{})
	ms := collect(t, r)
	for name, shift := range map[string]int{"shardcast.lag.duration": 0, "shardcast.handler.duration": 1} {
		h := histogram(t, ms, name)
		if !slices.Equal(h.Bounds, bounds) {
			t.Fatalf("%s bounds %v", name, h.Bounds)
		}
		// Bucket i is (bounds[i-1], bounds[i]]: "below" puts one duration
		// in each bucket up to the last bound, "at" one in each from the
		// second on (the one at 60s in the overflow bucket).
		for i, n := range h.BucketCounts {
			want := uint64(1)
			if (shift == 0 && i == len(bounds)) || (shift == 1 && i == 0) {
				want = 0
			}
			if n != want {
				t.Errorf("%s bucket %d (le %v): %d, want %d", name, i, bound(bounds, i), n, want)
			}
		}
		if h.Count != uint64(len(bounds)) {
			t.Errorf("%s count = %d", name, h.Count)
		}
	}
}

func bound(bounds []float64, i int) float64 {
	if i < len(bounds) {
		return bounds[i]
	}
	return math.Inf(1)
}

func TestHistogramValues(t *testing.T) {
	var h shardcast.HistogramSnapshot
	for _, d := range []time.Duration{time.Microsecond, time.Millisecond, time.Second, 2 * time.Minute, -time.Second} {
		h.Record(d)
	}
	f := &fakeBroker{latency: shardcast.LatencyStats{Lag: h}}
	mp, r := newReader(t)
	register(t, mp, f, shardcastotel.Options{})
	ms := collect(t, r)
	p := histogram(t, ms, "shardcast.lag.duration")
	if p.Count != 4 {
		t.Errorf("count %d, want 4 (the negative one apart)", p.Count)
	}
	// Each recorded at its broker bucket's midpoint (≤1.6% off), the
	// 2-minute one just above 60s.
	if want := 1e-6 + 1e-3 + 1 + 60; math.Abs(p.Sum-want) > 0.02*want {
		t.Errorf("sum %v, want about %v", p.Sum, want)
	}
	if maxV, ok := p.Max.Value(); !ok || maxV <= 60 || maxV > 60.001 {
		t.Errorf("max %v, want just above 60", maxV)
	}
	if n := p.BucketCounts[len(p.BucketCounts)-1]; n != 1 {
		t.Errorf("above 60s: %d, want 1", n)
	}
	if got := value(t, ms, "shardcast.lag.negative.messages"); got != 1 {
		t.Errorf("negative = %v, want 1", got)
	}
	if got := value(t, ms, "shardcast.lag.negative.time"); got != 1 {
		t.Errorf("negative time = %v, want 1", got)
	}

	// A second collection records nothing new; new durations are
	// recorded once.
	if got := histogram(t, collect(t, r), "shardcast.lag.duration").Count; got != 4 {
		t.Errorf("count %d after an idle collection, want 4", got)
	}
	older := snapshotOf(-time.Second, time.Microsecond, time.Millisecond, time.Second) // h without the 2-minute lag
	h.Record(time.Millisecond)
	h.Record(time.Millisecond)
	f.latency.Lag = h
	if got := histogram(t, collect(t, r), "shardcast.lag.duration").Count; got != 6 {
		t.Errorf("count %d after two more, want 6", got)
	}
	// A snapshot older than one recorded (two collections read the broker
	// at once, the later one recorded first) adds nothing, and the
	// durations a newer one adds are recorded once.
	f.latency.Lag = older
	if got := histogram(t, collect(t, r), "shardcast.lag.duration").Count; got != 6 {
		t.Errorf("count %d after an older snapshot, want 6", got)
	}
	h.Record(time.Second)
	f.latency.Lag = h
	if got := histogram(t, collect(t, r), "shardcast.lag.duration").Count; got != 7 {
		t.Errorf("count %d after one more, want 7", got)
	}
}

// snapshotOf returns a snapshot of ds, with buckets of its own.
func snapshotOf(ds ...time.Duration) shardcast.HistogramSnapshot {
	var s shardcast.HistogramSnapshot
	for _, d := range ds {
		s.Record(d)
	}
	return s
}

func TestConfiguredBuckets(t *testing.T) {
	var h shardcast.HistogramSnapshot
	for _, d := range []time.Duration{time.Millisecond, 20 * time.Millisecond, 2 * time.Second, 2 * time.Minute} {
		h.Record(d)
	}
	mp, r := newReader(t)
	// Unsorted, duplicated and invalid bounds are cleaned up, not panicked on.
	register(t, mp, &fakeBroker{latency: shardcast.LatencyStats{Lag: h}},
		shardcastotel.Options{Buckets: []float64{1, 0.01, -1, 0.01, math.Inf(1), math.NaN(), 0.1}})
	p := histogram(t, collect(t, r), "shardcast.lag.duration")
	if !slices.Equal(p.Bounds, []float64{0.01, 0.1, 1}) || !slices.Equal(p.BucketCounts, []uint64{1, 1, 0, 2}) {
		t.Errorf("bounds %v counts %v, want [0.01 0.1 1] [1 1 0 2]", p.Bounds, p.BucketCounts)
	}
}

// A View of the SDK overrides the advised boundaries, for example with a
// base-2 exponential histogram.
func TestExponentialView(t *testing.T) {
	var h shardcast.HistogramSnapshot
	for _, d := range []time.Duration{time.Millisecond, 20 * time.Millisecond, 2 * time.Second} {
		h.Record(d)
	}
	r := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r), sdkmetric.WithView(sdkmetric.NewView(
		sdkmetric.Instrument{Name: "shardcast.*.duration"},
		sdkmetric.Stream{Aggregation: sdkmetric.AggregationBase2ExponentialHistogram{MaxSize: 160, MaxScale: 20}})))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	register(t, mp, &fakeBroker{latency: shardcast.LatencyStats{Lag: h}}, shardcastotel.Options{})
	eh, ok := collect(t, r)["shardcast.lag.duration"].Data.(metricdata.ExponentialHistogram[float64])
	if !ok || len(eh.DataPoints) != 1 || eh.DataPoints[0].Count != 3 {
		t.Fatalf("lag: %#v, want an exponential histogram of 3", eh)
	}
}

func TestOptionalInterfaces(t *testing.T) {
	mp, r := newReader(t)
	register(t, mp, statsOnly{}, shardcastotel.Options{Partitions: true, HotChannels: true})
	ms := collect(t, r)
	if len(ms) != 10 {
		t.Errorf("%d metrics, want the 10 of Stats: %v", len(ms), names(ms))
	}
	if got := value(t, ms, "shardcast.published.messages"); got != 3 {
		t.Errorf("published = %v, want 3", got)
	}
	if _, err := shardcastotel.Register(mp, nil, shardcastotel.Options{}); err == nil {
		t.Error("Register of a nil broker succeeded")
	}
	// A nil provider is the global one, a no-op until set.
	m, err := shardcastotel.Register(nil, statsOnly{}, shardcastotel.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Unregister(); err != nil {
		t.Fatal(err)
	}
}

func names(ms map[string]metricdata.Metrics) []string {
	var out []string
	for n := range ms {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

func TestOmitNodesAndDuplicateAddrs(t *testing.T) {
	f := &fakeBroker{nodes: []shardcast.NodeStats{
		{Addr: "a:1", Received: 2, Down: time.Second},
		{Addr: "b:1", Received: 5},
		{Addr: "a:1", Received: 3, Down: time.Second},
		{Addr: "no-port", Received: 1},
	}, partitions: []shardcast.PartitionStats{{Partition: 0, Master: "a:1", Channels: 2}, {Partition: 1, Channels: 1}, {Partition: 0}}}
	mp, r := newReader(t)
	register(t, mp, f, shardcastotel.Options{Partitions: true})
	ms := collect(t, r)
	a := []attribute.KeyValue{shardcastotel.AttrServerAddress.String("a"), shardcastotel.AttrServerPort.Int(1)}
	if got := value(t, ms, "shardcast.node.received.messages", a...); got != 5 {
		t.Errorf("a:1 received = %v, want 5 (two entries added)", got)
	}
	if got := value(t, ms, "shardcast.node.down.time", a...); got != 2 {
		t.Errorf("a:1 down = %v, want 2", got)
	}
	if got := value(t, ms, "shardcast.node.received.messages", shardcastotel.AttrServerAddress.String("no-port")); got != 1 {
		t.Errorf("no-port received = %v, want 1", got)
	}
	if n := len(points(ms["shardcast.node.received.messages"])); n != 3 {
		t.Errorf("%d node streams, want 3", n)
	}
	// Partition 0 listed twice counts once; partition 1 has no master:
	// no owner stream for it.
	if got := sum(t, ms, "shardcast.partition.channels"); got != 3 {
		t.Errorf("partition channels = %v, want 3", got)
	}
	owners := points(ms["shardcast.partition.owner"])
	if len(owners) != 1 || !has(owners[0].attrs, append(a, shardcastotel.AttrPartition.Int(0))) {
		t.Errorf("owners %v, want partition 0 on a:1", owners)
	}

	mp, r = newReader(t)
	register(t, mp, f, shardcastotel.Options{OmitNodes: true, OmitLatency: true})
	ms = collect(t, r)
	for _, name := range []string{"shardcast.node.received.messages", "shardcast.lag.duration", "shardcast.lag.negative.messages"} {
		if _, ok := ms[name]; ok {
			t.Errorf("OmitNodes, OmitLatency: %s observed", name)
		}
	}
	if _, ok := ms["shardcast.published.messages"]; !ok {
		t.Error("OmitNodes, OmitLatency: shardcast.published.messages missing")
	}
}

func TestEvents(t *testing.T) {
	var events shardcastotel.Events
	hook := events.Chain(nil)
	hook(shardcast.Event{Kind: shardcast.EventDropped, Count: 7})
	hook(shardcast.Event{Kind: shardcast.EventDropped})
	events.OnEvent(shardcast.Event{Kind: shardcast.EventKind(42)})
	var passed int
	events.Chain(func(shardcast.Event) { passed++ })(shardcast.Event{Kind: shardcast.EventError})
	mp, r := newReader(t)
	register(t, mp, statsOnly{}, shardcastotel.Options{Events: &events})
	ms := collect(t, r)
	for k, want := range map[string]float64{"dropped": 2, "EventKind(42)": 1, "error": 1, "interrupted": 0, "relayout": 0} {
		if got := value(t, ms, "shardcast.events", shardcastotel.AttrEventKind.String(k)); got != want {
			t.Errorf("%s events = %v, want %v", k, got, want)
		}
	}
	if n := len(points(ms["shardcast.events"])); n != 8 {
		t.Errorf("%d kinds, want 8", n)
	}
	if passed != 1 {
		t.Errorf("chained hook called %d times, want 1", passed)
	}
}

func TestAttributes(t *testing.T) {
	f := &fakeBroker{nodes: []shardcast.NodeStats{{Addr: "a:1"}}}
	mp, r := newReader(t)
	a, b := attribute.String("broker", "a"), attribute.String("broker", "b")
	register(t, mp, f, shardcastotel.Options{Attributes: []attribute.KeyValue{a}})
	register(t, mp, statsOnly{}, shardcastotel.Options{Attributes: []attribute.KeyValue{b}})
	ms := collect(t, r)
	if got := value(t, ms, "shardcast.published.messages", b); got != 3 {
		t.Errorf("broker b published = %v, want 3", got)
	}
	if got := value(t, ms, "shardcast.published.messages", a); got != 0 {
		t.Errorf("broker a published = %v, want 0", got)
	}
	if got := value(t, ms, "shardcast.node.received.messages", a, shardcastotel.AttrServerPort.Int(1)); got != 0 {
		t.Errorf("broker a node = %v", got)
	}
}

// After Unregister no collection reads the broker.
func TestUnregisterStopsReads(t *testing.T) {
	f := &fakeBroker{}
	mp, r := newReader(t)
	m := register(t, mp, f, shardcastotel.Options{})
	collect(t, r)
	if f.reads.Load() != 1 {
		t.Fatalf("%d reads after one collection", f.reads.Load())
	}
	if err := m.Unregister(); err != nil {
		t.Fatal(err)
	}
	collect(t, r)
	if n := f.reads.Load(); n != 1 {
		t.Errorf("%d reads after Unregister, want 1", n)
	}
}

// A provider whose meter fails to register the callback: Register says so.
func TestRegisterCallbackError(t *testing.T) {
	_, err := shardcastotel.Register(failingProvider{}, statsOnly{}, shardcastotel.Options{})
	if !errors.Is(err, errRefused) {
		t.Errorf("Register = %v, want %v", err, errRefused)
	}
}

var errRefused = errors.New("refused")

type failingProvider struct{ noop.MeterProvider }

func (failingProvider) Meter(string, ...metric.MeterOption) metric.Meter { return failingMeter{} }

type failingMeter struct{ noop.Meter }

func (failingMeter) RegisterCallback(metric.Callback, ...metric.Observable) (metric.Registration, error) {
	return nil, errRefused
}

// A publish-only broker's publishes name no node; a list that names one
// channel twice for one node and direction gives one stream.
func TestHotChannelsListed(t *testing.T) {
	f := &fakeBroker{hot: []shardcast.HotChannel{
		{Channel: "a", Direction: shardcast.HotOut, Rate: 10, Share: 0.5},
		{Channel: "a", Direction: shardcast.HotOut, Rate: 9, Share: 0.4},
		{Channel: "a", Direction: shardcast.HotIn, Node: "n:1", Rate: 7, Share: 0.7},
	}}
	mp, r := newReader(t)
	register(t, mp, f, shardcastotel.Options{})
	if _, ok := collect(t, r)["shardcast.hot_channel.rate"]; ok {
		t.Error("hot channels observed without Options.HotChannels")
	}
	mp, r = newReader(t)
	register(t, mp, f, shardcastotel.Options{HotChannels: true})
	ms := collect(t, r)
	if n := len(points(ms["shardcast.hot_channel.share"])); n != 2 {
		t.Errorf("%d share streams, want 2", n)
	}
	out := []attribute.KeyValue{shardcastotel.AttrChannel.String("a"), shardcastotel.AttrDirection.String("out")}
	if got := value(t, ms, "shardcast.hot_channel.rate", out...); got != 10 {
		t.Errorf("out rate = %v, want 10 (the first listed)", got)
	}
	for _, p := range points(ms["shardcast.hot_channel.rate"]) {
		if has(p.attrs, out) && p.attrs.HasValue(shardcastotel.AttrServerAddress) {
			t.Errorf("publish-only stream names a server: %v", p.attrs.ToSlice())
		}
	}
	in := []attribute.KeyValue{shardcastotel.AttrDirection.String("in"), shardcastotel.AttrServerAddress.String("n"), shardcastotel.AttrServerPort.Int(1)}
	if got := value(t, ms, "shardcast.hot_channel.share", in...); got != 0.7 {
		t.Errorf("in share = %v, want 0.7", got)
	}
}
