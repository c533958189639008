package shardcastotel

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync"

	"github.com/shardcast/shardcast"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// ScopeName is the instrumentation scope (the Meter's name) under which
// Register creates its instruments.
const ScopeName = "github.com/shardcast/shardcast/contrib/otel"

// Attribute keys beside Options.Attributes. A node, or the master that owns
// a partition, is named by server.address and server.port, as the
// OpenTelemetry semantic conventions name the server a client talks to.
const (
	AttrServerAddress = attribute.Key("server.address")
	AttrServerPort    = attribute.Key("server.port")
	AttrPartition     = attribute.Key("shardcast.partition")
	AttrEventKind     = attribute.Key("shardcast.event.kind")
	AttrChannel       = attribute.Key("shardcast.channel")
	AttrDirection     = attribute.Key("shardcast.direction")
)

// StatsSource is what Register needs from a broker: its cumulative
// counters (shardcast.StatsSource). Register observes the optional interfaces
// below where the broker implements them.
type StatsSource = shardcast.StatsSource

// LatencySource is shardcast.LatencySource: lag and handler-time
// histograms (both engines).
type LatencySource = shardcast.LatencySource

// NodeStatsSource is shardcast.NodeStatsSource: counters per Redis
// instance or master (both engines).
type NodeStatsSource = shardcast.NodeStatsSource

// PartitionStatsSource is shardcast.PartitionStatsSource: counters per
// partition (the cluster engine).
type PartitionStatsSource = shardcast.PartitionStatsSource

// HotChannelsSource is shardcast.HotChannelsSource: hot-channel detection
// (both engines; see shardcast.Options.HotSampleRate).
type HotChannelsSource = shardcast.HotChannelsSource

// Options tune Register. The zero value observes the broker, latency and
// per-node figures with DefaultBuckets advised for the histograms.
type Options struct {
	// Attributes are added to every measurement, for example
	// attribute.String("shardcast.engine", "cluster"), or one that tells
	// apart two brokers of one process registered on one MeterProvider
	// (two Registers observing the same attributes would report
	// conflicting values for one stream).
	Attributes []attribute.KeyValue

	// Buckets are the explicit bucket boundaries, in seconds, advised for
	// shardcast.lag.duration and shardcast.handler.duration. Nil means
	// DefaultBuckets. They are sorted and deduplicated; boundaries that
	// are not positive and finite are dropped. A View of the SDK
	// overrides them (a base-2 exponential histogram, for instance).
	//
	// Each duration the broker counted is recorded at the midpoint of
	// the broker's bucket that holds it (each at most ~3.1% wide), so a
	// boundary inside one of those buckets puts the bucket's durations
	// whole on one side of it. DefaultBuckets are bounds of the broker's
	// buckets and exact.
	Buckets []float64

	// OmitLatency leaves out the two histograms and the negative-lag
	// counters. Feeding the histograms costs one Record call per
	// delivered message at each collection (see the package
	// documentation), which a broker delivering millions of messages a
	// second may not want to pay.
	OmitLatency bool

	// OmitNodes leaves out the shardcast.node.* instruments. Their
	// cardinality is the number of Redis instances or masters.
	OmitNodes bool

	// Partitions adds the shardcast.partition.* instruments, one stream
	// per partition and instrument (128 partitions by default), if the
	// broker implements PartitionStatsSource. Off by default for that
	// cardinality.
	Partitions bool

	// HotChannels adds shardcast.hot_channel.rate and
	// shardcast.hot_channel.share, with shardcast.channel,
	// shardcast.direction ("in", "out") and the node's server.address and
	// server.port, for the busiest channels of the broker's last complete
	// hot-channel window, if the broker implements HotChannelsSource: at
	// most shardcast.Options.HotTopK streams each (32 by default),
	// estimated from sampled messages. Off by default: the channel
	// attribute takes a new value for every channel that is ever among
	// the busiest.
	HotChannels bool

	// Events, if set, is observed as shardcast.events. Chain
	// Events.OnEvent into the broker's shardcast.Options.OnEvent.
	Events *Events
}

// Metrics is the registration of one broker's instruments on a
// MeterProvider. Its callback reads the broker at every collection and
// keeps no copy of the counters; for the histograms it keeps the bucket
// counts recorded so far. It starts no goroutine.
type Metrics struct {
	stats      StatsSource
	latency    LatencySource        // nil if the broker has none
	nodes      NodeStatsSource      // nil if absent or omitted
	partitions PartitionStatsSource // nil if absent or not asked for
	hot        HotChannelsSource    // nil if absent or not asked for
	events     *Events

	common []attribute.KeyValue
	set    attribute.Set // common, as a set

	statInsts      []intStat
	lat            *latencyInstruments
	nodeInsts      []intNode
	nodeDown       floatNode
	partitionInsts []intPartition
	partitionTime  floatPartition
	partitionOwner metric.Int64Observable
	hotRate        metric.Float64Observable
	hotShare       metric.Float64Observable
	eventsInst     metric.Int64Observable

	once sync.Once
	reg  metric.Registration
	err  error
}

// Register creates shardcast's instruments on a Meter of mp (named
// ScopeName) and registers the callback that observes b at each
// collection. A nil mp means the global MeterProvider (otel.GetMeterProvider).
// It observes b's Stats, and the figures of the optional interfaces b
// implements (LatencySource, NodeStatsSource, PartitionStatsSource,
// HotChannelsSource) as opts allows; the package documentation lists them.
//
// An error from mp (an invalid instrument, a failed registration) is
// returned with the Metrics if the callback could still be registered;
// without a registration Register returns nil Metrics.
func Register(mp metric.MeterProvider, b StatsSource, opts Options) (*Metrics, error) {
	if b == nil {
		return nil, errors.New("shardcastotel: Register needs a broker")
	}
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	m := &Metrics{stats: b, events: opts.Events}
	m.common = append([]attribute.KeyValue(nil), opts.Attributes...)
	m.set = attribute.NewSet(m.common...)
	if !opts.OmitLatency {
		m.latency, _ = b.(LatencySource)
	}
	if !opts.OmitNodes {
		m.nodes, _ = b.(NodeStatsSource)
	}
	if opts.Partitions {
		m.partitions, _ = b.(PartitionStatsSource)
	}
	if opts.HotChannels {
		m.hot, _ = b.(HotChannelsSource)
	}

	bld := &builder{meter: mp.Meter(ScopeName)}
	m.statInsts = bld.statsInstruments()
	if m.latency != nil {
		m.lat = bld.latencyInstruments(normalBuckets(opts.Buckets))
	}
	if m.nodes != nil {
		m.nodeInsts, m.nodeDown = bld.nodeInstruments()
	}
	if m.partitions != nil {
		m.partitionInsts, m.partitionTime, m.partitionOwner = bld.partitionInstruments()
	}
	if m.hot != nil {
		m.hotRate, m.hotShare = bld.hotInstruments()
	}
	if m.events != nil {
		m.eventsInst = bld.eventsInstrument()
	}
	reg, err := bld.meter.RegisterCallback(m.observe, bld.observables...)
	if err != nil {
		return nil, errors.Join(bld.err, err)
	}
	m.reg = reg
	return m, bld.err
}

// Unregister removes the callback: from its return on, no collection
// reads the broker, and the observable instruments report nothing more for
// it. OpenTelemetry instruments cannot be removed, so the histograms keep
// what they were given (a cumulative reader goes on exporting it). It is
// idempotent and safe for concurrent use.
func (m *Metrics) Unregister() error {
	m.once.Do(func() { m.err = m.reg.Unregister() })
	return m.err
}

// observe is the callback: it reads the broker once per collection.
func (m *Metrics) observe(ctx context.Context, o metric.Observer) error {
	common := metric.WithAttributeSet(m.set)
	s := m.stats.Stats()
	for _, in := range m.statInsts {
		o.ObserveInt64(in.inst, in.value(s), common)
	}
	if m.lat != nil {
		ls := m.latency.Latency()
		o.ObserveInt64(m.lat.negative, i64(ls.Lag.Negative), common)
		o.ObserveFloat64(m.lat.negativeTime, -ls.Lag.NegativeSum.Seconds(), common)
		m.lat.lag.record(ctx, ls.Lag, common)
		m.lat.handler.record(ctx, ls.HandlerTime, common)
	}
	if m.nodes != nil {
		m.observeNodes(o)
	}
	if m.partitions != nil {
		m.observePartitions(o)
	}
	if m.hot != nil {
		m.observeHot(o)
	}
	if m.events != nil {
		for _, e := range m.events.Counts() {
			o.ObserveInt64(m.eventsInst, i64(e.Count), m.with(AttrEventKind.String(e.Kind.String())))
		}
	}
	return nil
}

func (m *Metrics) observeNodes(o metric.Observer) {
	// One stream per address: should an engine ever list an address
	// twice, its counters are added up rather than observed twice.
	nodes := m.nodes.NodeStats()
	merged := nodes[:0:0]
	index := make(map[string]int, len(nodes))
	for _, n := range nodes {
		i, ok := index[n.Addr]
		if !ok {
			index[n.Addr] = len(merged)
			merged = append(merged, n)
			continue
		}
		merged[i].Add(n)
	}
	for _, n := range merged {
		opt := m.with(serverAttrs(n.Addr)...)
		for _, in := range m.nodeInsts {
			o.ObserveInt64(in.inst, in.value(n), opt)
		}
		o.ObserveFloat64(m.nodeDown.inst, m.nodeDown.value(n), opt)
	}
}

func (m *Metrics) observePartitions(o metric.Observer) {
	seen := make(map[int]bool)
	for _, p := range m.partitions.PartitionStats() {
		if seen[p.Partition] {
			continue
		}
		seen[p.Partition] = true
		part := AttrPartition.Int(p.Partition)
		opt := m.with(part)
		for _, in := range m.partitionInsts {
			o.ObserveInt64(in.inst, in.value(p), opt)
		}
		o.ObserveFloat64(m.partitionTime.inst, m.partitionTime.value(p), opt)
		if p.Master != "" {
			o.ObserveInt64(m.partitionOwner, 1, m.with(append(serverAttrs(p.Master), part)...))
		}
	}
}

func (m *Metrics) observeHot(o metric.Observer) {
	// One stream per channel, direction and node, should a list name one
	// twice.
	seen := make(map[[3]string]bool)
	for _, h := range m.hot.HotChannels() {
		key := [3]string{h.Channel, h.Direction.String(), h.Node}
		if seen[key] {
			continue
		}
		seen[key] = true
		kvs := []attribute.KeyValue{AttrChannel.String(h.Channel), AttrDirection.String(key[1])}
		if h.Node != "" {
			kvs = append(kvs, serverAttrs(h.Node)...)
		}
		opt := m.with(kvs...)
		o.ObserveFloat64(m.hotRate, h.Rate, opt)
		o.ObserveFloat64(m.hotShare, h.Share, opt)
	}
}

// with returns the option for the common attributes and kvs.
func (m *Metrics) with(kvs ...attribute.KeyValue) metric.MeasurementOption {
	all := make([]attribute.KeyValue, 0, len(m.common)+len(kvs))
	all = append(append(all, m.common...), kvs...)
	return metric.WithAttributeSet(attribute.NewSet(all...))
}

// serverAttrs names a host:port as server.address and server.port; an
// address that does not split is server.address alone.
func serverAttrs(addr string) []attribute.KeyValue {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return []attribute.KeyValue{AttrServerAddress.String(addr)}
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return []attribute.KeyValue{AttrServerAddress.String(addr)}
	}
	return []attribute.KeyValue{AttrServerAddress.String(host), AttrServerPort.Int(p)}
}
