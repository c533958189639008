package shardcastprom_test

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/cluster"
	shardcastprom "github.com/shardcast/shardcast/contrib/prometheus"
	"github.com/shardcast/shardcast/redistest"
	"github.com/shardcast/shardcast/sharded"
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

// pubSub subscribes channels on b, publishes rounds messages to each, and
// waits until b's handler has returned from all of them.
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
	for r := range rounds {
		for _, ch := range channels {
			if err := b.Publish(ctx, ch, fmt.Appendf(nil, "m%d", r)); err != nil {
				t.Fatal(err)
			}
		}
	}
	want := uint64(len(channels) * rounds)
	waitFor(t, func() bool { return b.Stats().Delivered >= want }, fmt.Sprintf("%d deliveries", want))
}

func channelNames(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}

// gather registers c alone in a pedantic registry (which checks every
// metric against its descriptor and the families for consistency), lints
// the result, runs promtool over its text exposition when promtool is
// installed, and returns the families by name.
func gather(t *testing.T, c prometheus.Collector) map[string]*dto.MetricFamily {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	promtoolCheck(t, mfs)
	out := make(map[string]*dto.MetricFamily, len(mfs))
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	return out
}

// promtoolCheck pipes the text exposition of mfs through `promtool check
// metrics` (Debian package prometheus), if promtool is on PATH.
func promtoolCheck(t *testing.T, mfs []*dto.MetricFamily) {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		t.Log("promtool not installed; testutil's lint is the check")
		return
	}
	var text bytes.Buffer
	enc := expfmt.NewEncoder(&text, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(path, "check", "metrics")
	cmd.Stdin = &text
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}

// value returns the value of the family's metric whose labels include
// labels (name, value pairs), failing the test if there is none.
func value(t *testing.T, mfs map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	t.Helper()
	mf, ok := mfs[name]
	if !ok {
		t.Fatalf("family %s missing", name)
	}
next:
	for _, m := range mf.GetMetric() {
		for i := 0; i+1 < len(labels); i += 2 {
			if !hasLabel(m, labels[i], labels[i+1]) {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.GetCounter().GetValue()
		case m.Gauge != nil:
			return m.GetGauge().GetValue()
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount())
		}
	}
	t.Fatalf("%s%v missing", name, labels)
	return 0
}

func hasLabel(m *dto.Metric, name, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}

// sum adds up the values of every metric of a counter or gauge family.
func sum(mf *dto.MetricFamily) float64 {
	var s float64
	for _, m := range mf.GetMetric() {
		s += m.GetCounter().GetValue() + m.GetGauge().GetValue()
	}
	return s
}

func TestShardedBroker(t *testing.T) {
	s1, s2 := redistest.StartStandalone(t), redistest.StartStandalone(t)
	var events shardcastprom.Events
	var hooked int
	b, err := sharded.New(sharded.Config{
		Addrs: []string{s1.Addr(), s2.Addr()},
		Options: shardcast.Options{
			Handler: func(shardcast.Message) {},
			OnEvent: events.Chain(func(shardcast.Event) { hooked++ }),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	const nChannels, rounds = 40, 5
	pubSub(t, b, channelNames("sharded", nChannels), rounds)

	c := shardcastprom.NewCollector(b, shardcastprom.Options{
		ConstLabels: prometheus.Labels{"engine": "sharded"},
		Events:      &events,
		Partitions:  true, // the sharded engine has none: no family appears
	})
	mfs := gather(t, c)
	const total = nChannels * rounds
	for name, want := range map[string]float64{
		"shardcast_published_total":  total,
		"shardcast_received_total":   total,
		"shardcast_delivered_total":  total,
		"shardcast_dropped_total":    0,
		"shardcast_bad_frames_total": 0,
		"shardcast_stale_total":      0,
		"shardcast_reconnects_total": 0,
		"shardcast_channels":         nChannels,
		"shardcast_queue_depth":      0,
		"shardcast_lag_seconds":      total, // sample count
	} {
		if got := value(t, mfs, name, "engine", "sharded"); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	// Fast handler calls are sampled (see shardcast.LatencyStats).
	if got := value(t, mfs, "shardcast_handler_seconds", "engine", "sharded"); got < 1 || got > total {
		t.Errorf("shardcast_handler_seconds count = %v, want 1..%v", got, total)
	}
	if got := value(t, mfs, "shardcast_queue_high_water"); got < 1 {
		t.Errorf("shardcast_queue_high_water = %v, want >= 1", got)
	}
	for _, name := range []string{"shardcast_lag_negative_total", "shardcast_lag_negative_seconds_total"} {
		if _, ok := mfs[name]; !ok {
			t.Errorf("family %s missing", name)
		}
	}

	// Per node: one series per instance, adding up to the broker's totals.
	for _, name := range []string{"shardcast_node_published_total", "shardcast_node_received_total"} {
		if n := len(mfs[name].GetMetric()); n != 2 {
			t.Errorf("%s has %d series, want 2", name, n)
		}
		if got := sum(mfs[name]); got != total {
			t.Errorf("sum of %s = %v, want %v", name, got, total)
		}
	}
	for _, addr := range []string{s1.Addr(), s2.Addr()} {
		if got := value(t, mfs, "shardcast_node_received_total", "node", addr); got == 0 {
			t.Errorf("node %s received nothing", addr)
		}
	}
	for _, name := range []string{"shardcast_node_down_seconds_total", "shardcast_node_resubscribe_commands_total",
		"shardcast_node_reconnects_total", "shardcast_node_dropped_total", "shardcast_node_bad_frames_total", "shardcast_node_stale_total"} {
		if n := testutil.CollectAndCount(c, name); n != 2 {
			t.Errorf("%s has %d series, want 2", name, n)
		}
	}
	if n := testutil.CollectAndCount(c, "shardcast_partition_channels"); n != 0 {
		t.Errorf("sharded broker exported %d partition series", n)
	}
	// Every kind is exported from the start; no event was raised.
	if n := testutil.CollectAndCount(c, "shardcast_events_total"); n != 7 {
		t.Errorf("shardcast_events_total has %d series, want 7", n)
	}
	if got := value(t, mfs, "shardcast_events_total", "kind", "interrupted"); got != 0 {
		t.Errorf("interrupted events = %v, want 0", got)
	}

	// A reconnect shows up as events, counted by the collector and passed
	// on to the application's hook.
	if err := s1.Kill(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		return testutil.ToFloat64(eventCounter(c, "interrupted")) >= 1
	}, "an interrupted event")
	if err := s1.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		return testutil.ToFloat64(eventCounter(c, "restored")) >= 1
	}, "a restored event")
	mfs = gather(t, c)
	if got := value(t, mfs, "shardcast_node_reconnects_total", "node", s1.Addr()); got < 1 {
		t.Errorf("node %s reconnects = %v, want >= 1", s1.Addr(), got)
	}
	if got := value(t, mfs, "shardcast_node_down_seconds_total", "node", s1.Addr()); got <= 0 {
		t.Errorf("node %s down seconds = %v, want > 0", s1.Addr(), got)
	}
	if got := value(t, mfs, "shardcast_node_reconnects_total", "node", s2.Addr()); got != 0 {
		t.Errorf("node %s reconnects = %v, want 0", s2.Addr(), got)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if hooked == 0 {
		t.Error("the chained hook saw no event")
	}
}

// eventCounter is a collector of the one series shardcast_events_total{kind}
// of c, for testutil.ToFloat64.
func eventCounter(c prometheus.Collector, kind string) prometheus.Collector {
	return filtered{c, func(m *dto.Metric) bool { return hasLabel(m, "kind", kind) }}
}

type filtered struct {
	prometheus.Collector
	keep func(*dto.Metric) bool
}

func (f filtered) Collect(ch chan<- prometheus.Metric) {
	all := make(chan prometheus.Metric)
	go func() { f.Collector.Collect(all); close(all) }()
	for m := range all {
		var d dto.Metric
		if m.Write(&d) == nil && f.keep(&d) {
			ch <- m
		}
	}
}

func TestClusterBrokerPartitions(t *testing.T) {
	cl := redistest.StartCluster(t, 1, 0)
	b, err := cluster.New(cluster.Config{
		Addrs:      cl.Seeds(),
		Partitions: 16,
		Options:    shardcast.Options{Handler: func(shardcast.Message) {}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	const nChannels, rounds = 30, 2
	pubSub(t, b, channelNames("cluster", nChannels), rounds)

	// Without Options.Partitions, no partition family.
	if n := testutil.CollectAndCount(shardcastprom.NewCollector(b, shardcastprom.Options{}), "shardcast_partition_channels"); n != 0 {
		t.Errorf("partition series without Options.Partitions: %d", n)
	}
	c := shardcastprom.NewCollector(b, shardcastprom.Options{Partitions: true, NativeHistograms: true})
	mfs := gather(t, c)
	for name, want := range map[string]float64{
		"shardcast_partition_channels":       nChannels,
		"shardcast_partition_received_total": nChannels * rounds,
		"shardcast_partition_info":           16,
		"shardcast_node_received_total":      nChannels * rounds,
	} {
		if got := sum(mfs[name]); got != want {
			t.Errorf("sum of %s = %v, want %v", name, got, want)
		}
	}
	for _, name := range []string{"shardcast_partition_channels", "shardcast_partition_received_total",
		"shardcast_partition_dropped_total", "shardcast_partition_bad_frames_total",
		"shardcast_partition_stale_total", "shardcast_partition_interrupted_seconds_total", "shardcast_partition_info"} {
		if n := len(mfs[name].GetMetric()); n != 16 {
			t.Errorf("%s has %d series, want 16", name, n)
		}
	}
	// The native histogram rides along the classic one.
	h := mfs["shardcast_lag_seconds"].GetMetric()[0].GetHistogram()
	if h.GetSchema() != shardcastprom.NativeSchema || len(h.GetBucket()) == 0 {
		t.Errorf("lag histogram: schema %d, %d classic buckets", h.GetSchema(), len(h.GetBucket()))
	}
	var native int64
	var running int64
	for _, d := range h.GetPositiveDelta() {
		running += d
		native += running
	}
	if got := uint64(native) + h.GetZeroCount(); got != nChannels*rounds {
		t.Errorf("native buckets hold %d, want %d", got, nChannels*rounds)
	}
}
