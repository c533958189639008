package shardcastotel_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	shardcastotel "github.com/shardcast/shardcast/contrib/otel"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// waitTimeout bounds every wait: the test machines are small, shared and
// run with -race.
const waitTimeout = 30 * time.Second

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// newReader returns a ManualReader and the SDK MeterProvider it reads,
// shut down at the end of the test.
func newReader(t *testing.T) (*sdkmetric.MeterProvider, *sdkmetric.ManualReader) {
	t.Helper()
	r := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	return mp, r
}

// register registers b on mp, failing the test on an error, and
// unregisters it at the end of the test.
func register(t *testing.T, mp *sdkmetric.MeterProvider, b shardcastotel.StatsSource, opts shardcastotel.Options) *shardcastotel.Metrics {
	t.Helper()
	m, err := shardcastotel.Register(mp, b, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Unregister() })
	return m
}

// collect reads r once and returns the metrics of shardcast's scope by
// name; a metric of another scope fails the test.
func collect(t *testing.T, r *sdkmetric.ManualReader) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := make(map[string]metricdata.Metrics)
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != shardcastotel.ScopeName {
			t.Errorf("metrics under scope %q", sm.Scope.Name)
		}
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

// has reports whether set holds every one of kvs.
func has(set attribute.Set, kvs []attribute.KeyValue) bool {
	for _, kv := range kvs {
		if v, ok := set.Value(kv.Key); !ok || v != kv.Value {
			return false
		}
	}
	return true
}

// value returns the value of the metric's data point whose attributes
// include kvs (a histogram's count), failing the test if there is none.
func value(t *testing.T, ms map[string]metricdata.Metrics, name string, kvs ...attribute.KeyValue) float64 {
	t.Helper()
	m, ok := ms[name]
	if !ok {
		t.Fatalf("metric %s missing", name)
	}
	for _, p := range points(m) {
		if has(p.attrs, kvs) {
			return p.value
		}
	}
	t.Fatalf("%s%v missing", name, kvs)
	return 0
}

// point is one data point of any kind, as a number.
type point struct {
	attrs attribute.Set
	value float64
}

// points returns m's data points; a histogram's value is its count.
func points(m metricdata.Metrics) []point {
	var out []point
	switch d := m.Data.(type) {
	case nil: // a metric the collection did not have
		return nil
	case metricdata.Sum[int64]:
		for _, p := range d.DataPoints {
			out = append(out, point{p.Attributes, float64(p.Value)})
		}
	case metricdata.Sum[float64]:
		for _, p := range d.DataPoints {
			out = append(out, point{p.Attributes, p.Value})
		}
	case metricdata.Gauge[int64]:
		for _, p := range d.DataPoints {
			out = append(out, point{p.Attributes, float64(p.Value)})
		}
	case metricdata.Gauge[float64]:
		for _, p := range d.DataPoints {
			out = append(out, point{p.Attributes, p.Value})
		}
	case metricdata.Histogram[float64]:
		for _, p := range d.DataPoints {
			out = append(out, point{p.Attributes, float64(p.Count)})
		}
	default:
		panic(fmt.Sprintf("%s: unexpected data %T", m.Name, m.Data))
	}
	return out
}

// sum adds up the values of every data point of the metric.
func sum(t *testing.T, ms map[string]metricdata.Metrics, name string) float64 {
	t.Helper()
	m, ok := ms[name]
	if !ok {
		t.Fatalf("metric %s missing", name)
	}
	var s float64
	for _, p := range points(m) {
		s += p.value
	}
	return s
}

// histogram returns the metric's one histogram data point.
func histogram(t *testing.T, ms map[string]metricdata.Metrics, name string) metricdata.HistogramDataPoint[float64] {
	t.Helper()
	h, ok := ms[name].Data.(metricdata.Histogram[float64])
	if !ok || len(h.DataPoints) != 1 {
		t.Fatalf("%s: %#v, want one histogram data point", name, ms[name].Data)
	}
	return h.DataPoints[0]
}

// classic returns the count of each (previous bound, bound] bucket, and
// of the last one above every bound, that an exporter with "less than or
// equal" buckets computes from a broker snapshot: the broker's buckets
// whose Upper is at most the bound.
func classic(s shardcast.HistogramSnapshot, bounds []float64) []uint64 {
	out := make([]uint64, len(bounds)+1)
	for _, b := range s.Buckets {
		i := 0
		for i < len(bounds) && time.Duration(bounds[i]*1e9+0.5) < b.Upper {
			i++
		}
		out[i] += b.Count
	}
	return out
}

func channelNames(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}

// pubSub subscribes channels on b, publishes rounds messages to each, and
// waits until b's handler has returned from all of them (want in all,
// counting earlier calls).
func pubSub(t *testing.T, b interface {
	shardcast.Broker
	Stats() shardcast.Stats
}, channels []string, rounds int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := b.Subscribe(ctx, channels...); err != nil {
		t.Fatal(err)
	}
	want := b.Stats().Delivered + uint64(len(channels)*rounds)
	for r := range rounds {
		for _, ch := range channels {
			if err := b.Publish(ctx, ch, fmt.Appendf(nil, "m%d", r)); err != nil {
				t.Fatal(err)
			}
		}
	}
	waitFor(t, func() bool { return b.Stats().Delivered >= want }, fmt.Sprintf("%d deliveries", want))
}
