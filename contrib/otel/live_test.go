package shardcastotel_test

import (
	"context"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/cluster"
	shardcastotel "github.com/shardcast/shardcast/contrib/otel"
	"github.com/shardcast/shardcast/redistest"
	"github.com/shardcast/shardcast/sharded"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

var engineSharded = attribute.String("shardcast.engine", "sharded")

// kind is the attribute of shardcast.events for one kind.
func kind(k shardcast.EventKind) attribute.KeyValue {
	return shardcastotel.AttrEventKind.String(k.String())
}

// node returns the attributes naming server s.
func node(t *testing.T, s *redistest.Server) []attribute.KeyValue {
	t.Helper()
	host, _, err := net.SplitHostPort(s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	return []attribute.KeyValue{shardcastotel.AttrServerAddress.String(host), shardcastotel.AttrServerPort.Int(s.Port())}
}

func TestShardedBroker(t *testing.T) {
	s1, s2 := redistest.StartStandalone(t), redistest.StartStandalone(t)
	var events shardcastotel.Events
	var hooked atomic.Int64
	b, err := sharded.New(sharded.Config{
		Addrs: []string{s1.Addr(), s2.Addr()},
		Options: shardcast.Options{
			Handler: func(shardcast.Message) {},
			OnEvent: events.Chain(func(shardcast.Event) { hooked.Add(1) }),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	mp, r := newReader(t)
	m := register(t, mp, b, shardcastotel.Options{
		Attributes: []attribute.KeyValue{engineSharded},
		Events:     &events,
		Partitions: true, // the sharded engine has none: no instrument appears
	})

	// Before any traffic: every counter at 0, every event kind at 0.
	ms := collect(t, r)
	for _, name := range []string{"shardcast.published.messages", "shardcast.delivered.messages", "shardcast.channels"} {
		if got := value(t, ms, name, engineSharded); got != 0 {
			t.Errorf("%s = %v before traffic", name, got)
		}
	}
	if n := len(points(ms["shardcast.events"])); n != 7 {
		t.Errorf("shardcast.events has %d streams, want 7", n)
	}

	const nChannels, rounds = 40, 5
	chans := channelNames("sharded", nChannels)
	pubSub(t, b, chans, rounds)
	ms = collect(t, r)
	const total = nChannels * rounds
	for name, want := range map[string]float64{
		"shardcast.published.messages": total,
		"shardcast.received.messages":  total,
		"shardcast.delivered.messages": total,
		"shardcast.dropped.messages":   0,
		"shardcast.bad_frames":         0,
		"shardcast.stale.messages":     0,
		"shardcast.reconnects":         0,
		"shardcast.channels":           nChannels,
		"shardcast.queue.depth":        0,
		"shardcast.lag.duration":       total, // count
	} {
		if got := value(t, ms, name, engineSharded); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	if got := value(t, ms, "shardcast.queue.high_water"); got < 1 {
		t.Errorf("shardcast.queue.high_water = %v, want >= 1", got)
	}
	// Fast handler calls are sampled (see shardcast.LatencyStats).
	if got := value(t, ms, "shardcast.handler.duration"); got < 1 || got > total {
		t.Errorf("shardcast.handler.duration count = %v, want 1..%v", got, total)
	}
	for _, name := range []string{"shardcast.lag.negative.messages", "shardcast.lag.negative.time"} {
		if got := value(t, ms, name); got != 0 {
			t.Errorf("%s = %v, want 0 (one clock)", name, got)
		}
	}
	// The histogram's buckets are the broker's, at the default boundaries.
	checkLag := func() {
		t.Helper()
		h := histogram(t, ms, "shardcast.lag.duration")
		want := classic(b.Latency().Lag, shardcastotel.DefaultBuckets())
		if !slices.Equal(h.Bounds, shardcastotel.DefaultBuckets()) || !slices.Equal(h.BucketCounts, want) {
			t.Errorf("lag buckets %v at %v, want %v", h.BucketCounts, h.Bounds, want)
		}
	}
	checkLag()

	// Per node: one stream per instance, adding up to the broker's totals.
	for _, name := range []string{"shardcast.node.published.messages", "shardcast.node.received.messages"} {
		if n := len(points(ms[name])); n != 2 {
			t.Errorf("%s has %d streams, want 2", name, n)
		}
		if got := sum(t, ms, name); got != total {
			t.Errorf("sum of %s = %v, want %v", name, got, total)
		}
	}
	for _, s := range []*redistest.Server{s1, s2} {
		if got := value(t, ms, "shardcast.node.received.messages", node(t, s)...); got == 0 {
			t.Errorf("node %s received nothing", s.Addr())
		}
	}
	for _, name := range []string{"shardcast.node.down.time", "shardcast.node.resubscribe.commands",
		"shardcast.node.reconnects", "shardcast.node.dropped.messages", "shardcast.node.bad_frames", "shardcast.node.stale.messages"} {
		if n := len(points(ms[name])); n != 2 {
			t.Errorf("%s has %d streams, want 2", name, n)
		}
	}
	if _, ok := ms["shardcast.partition.channels"]; ok {
		t.Error("sharded broker observed partitions")
	}

	// More traffic: the counters move by as much, and the histogram gets
	// only the new lags (each collection records what the previous did not).
	pubSub(t, b, chans, 2)
	ms = collect(t, r)
	const total2 = total + 2*nChannels
	for _, name := range []string{"shardcast.published.messages", "shardcast.delivered.messages", "shardcast.lag.duration"} {
		if got := value(t, ms, name); got != total2 {
			t.Errorf("%s = %v after the second round, want %v", name, got, total2)
		}
	}
	checkLag()

	// A killed instance shows up as events, counted and passed on to the
	// application's hook, and in its node's counters.
	if got := value(t, ms, "shardcast.events", kind(shardcast.EventInterrupted)); got != 0 {
		t.Errorf("interrupted events = %v before the kill", got)
	}
	if err := s1.Kill(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		return value(t, collect(t, r), "shardcast.events", kind(shardcast.EventInterrupted)) >= 1
	}, "an interrupted event")
	if err := s1.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		return value(t, collect(t, r), "shardcast.events", kind(shardcast.EventRestored)) >= 1
	}, "a restored event")
	if hooked.Load() == 0 {
		t.Error("the chained hook saw no event")
	}
	ms = collect(t, r)
	if got := value(t, ms, "shardcast.node.reconnects", node(t, s1)...); got < 1 {
		t.Errorf("node %s reconnects = %v, want >= 1", s1.Addr(), got)
	}
	if got := value(t, ms, "shardcast.node.down.time", node(t, s1)...); got <= 0 {
		t.Errorf("node %s down time = %v, want > 0", s1.Addr(), got)
	}
	if got := value(t, ms, "shardcast.node.reconnects", node(t, s2)...); got != 0 {
		t.Errorf("node %s reconnects = %v, want 0", s2.Addr(), got)
	}
	if got := value(t, ms, "shardcast.reconnects"); got < 1 {
		t.Errorf("shardcast.reconnects = %v, want >= 1", got)
	}

	// Unregistered, the callback no longer runs: no observation, and the
	// histogram keeps what it had.
	if err := m.Unregister(); err != nil {
		t.Fatal(err)
	}
	if err := m.Unregister(); err != nil {
		t.Errorf("second Unregister: %v", err)
	}
	pubSub(t, b, chans, 1)
	ms = collect(t, r)
	for _, name := range []string{"shardcast.published.messages", "shardcast.node.received.messages", "shardcast.events"} {
		if n := len(points(ms[name])); n != 0 {
			t.Errorf("%s: %d streams after Unregister", name, n)
		}
	}
	if got := value(t, ms, "shardcast.lag.duration"); got != total2 {
		t.Errorf("lag count = %v after Unregister, want %v (unchanged)", got, total2)
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

	// Without Options.Partitions, no partition instrument.
	mp, r := newReader(t)
	register(t, mp, b, shardcastotel.Options{})
	if _, ok := collect(t, r)["shardcast.partition.channels"]; ok {
		t.Error("partitions observed without Options.Partitions")
	}
	mp, r = newReader(t)
	register(t, mp, b, shardcastotel.Options{Partitions: true})
	ms := collect(t, r)
	for name, want := range map[string]float64{
		"shardcast.partition.channels":          nChannels,
		"shardcast.partition.received.messages": nChannels * rounds,
		"shardcast.partition.owner":             16,
		"shardcast.node.received.messages":      nChannels * rounds,
		"shardcast.lag.duration":                nChannels * rounds,
	} {
		if got := sum(t, ms, name); got != want {
			t.Errorf("sum of %s = %v, want %v", name, got, want)
		}
	}
	for _, name := range []string{"shardcast.partition.channels", "shardcast.partition.received.messages",
		"shardcast.partition.dropped.messages", "shardcast.partition.bad_frames",
		"shardcast.partition.stale.messages", "shardcast.partition.interrupted.time", "shardcast.partition.owner"} {
		if n := len(points(ms[name])); n != 16 {
			t.Errorf("%s has %d streams, want 16", name, n)
		}
	}
	// The owner names the one master, by address and port.
	masters, err := cl.Masters(context.Background())
	if err != nil || len(masters) != 1 {
		t.Fatalf("masters %v, %v", masters, err)
	}
	master := masters[0]
	for _, p := range points(ms["shardcast.partition.owner"]) {
		if !has(p.attrs, node(t, master)) {
			t.Errorf("partition owner %v, want master %s", p.attrs.ToSlice(), master.Addr())
		}
	}
}

// Two readers of one provider collecting concurrently while the broker
// delivers: each reader ends up with every lag once.
func TestTwoReadersConcurrentCollect(t *testing.T) {
	s1 := redistest.StartStandalone(t)
	var events shardcastotel.Events
	b, err := sharded.New(sharded.Config{Addrs: []string{s1.Addr()},
		Options: shardcast.Options{Handler: func(shardcast.Message) {}, OnEvent: events.OnEvent}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	r1, r2 := sdkmetric.NewManualReader(), sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r1), sdkmetric.WithReader(r2))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	register(t, mp, b, shardcastotel.Options{Events: &events})

	chans := channelNames("conc", 20)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for _, r := range []*sdkmetric.ManualReader{r1, r2} {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
					var rm metricdata.ResourceMetrics
					if err := r.Collect(context.Background(), &rm); err != nil {
						t.Error(err)
						return
					}
				}
			}
		})
	}
	pubSub(t, b, chans, 20)
	close(stop)
	wg.Wait()
	want := float64(b.Latency().Lag.Count)
	if want != 400 {
		t.Fatalf("broker lag count %v, want 400", want)
	}
	for i, r := range []*sdkmetric.ManualReader{r1, r2} {
		if got := value(t, collect(t, r), "shardcast.lag.duration"); got != want {
			t.Errorf("reader %d: lag count %v, want %v", i+1, got, want)
		}
	}
}

// TestHotChannelsLive: one channel gets most of a broker's traffic; once a
// hot-channel window ended, it is observed for both directions, with its
// instance as the node and most of the node's share.
func TestHotChannelsLive(t *testing.T) {
	s := redistest.StartStandalone(t)
	b, err := sharded.New(sharded.Config{Addrs: []string{s.Addr()}, Options: shardcast.Options{
		Handler:       func(shardcast.Message) {},
		HotSampleRate: 1,
		HotWindow:     100 * time.Millisecond,
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	ctx := context.Background()
	cold := channelNames("cold", 4)
	if err := b.Subscribe(ctx, append(cold, "hot")...); err != nil {
		t.Fatal(err)
	}
	mp, r := newReader(t)
	register(t, mp, b, shardcastotel.Options{HotChannels: true})
	hot := func(dir string) []attribute.KeyValue {
		return append(node(t, s), shardcastotel.AttrChannel.String("hot"), shardcastotel.AttrDirection.String(dir))
	}
	found := func(ms map[string]metricdata.Metrics, dir string) (share, rate float64, ok bool) {
		for _, p := range points(ms["shardcast.hot_channel.share"]) {
			if has(p.attrs, hot(dir)) {
				share, ok = p.value, true
			}
		}
		for _, p := range points(ms["shardcast.hot_channel.rate"]) {
			if has(p.attrs, hot(dir)) {
				rate = p.value
			}
		}
		return share, rate, ok
	}
	// Windows end on traffic, so keep it going: 80% to one channel.
	var ms map[string]metricdata.Metrics
	waitFor(t, func() bool {
		for i := range 100 {
			ch := "hot"
			if i%5 == 0 {
				ch = cold[i/5%len(cold)]
			}
			if err := b.Publish(ctx, ch, []byte("x")); err != nil {
				t.Fatal(err)
			}
		}
		ms = collect(t, r)
		_, _, in := found(ms, "in")
		_, _, out := found(ms, "out")
		return in && out
	}, "the hot channel observed in both directions")
	for _, dir := range []string{"in", "out"} {
		share, rate, _ := found(ms, dir)
		if share <= 0.5 || share > 1 || rate <= 0 {
			t.Errorf("%s: share %v, rate %v; want a share above 0.5 and a rate above 0", dir, share, rate)
		}
	}
}
