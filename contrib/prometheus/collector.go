package shardcastprom

import (
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/shardcast/shardcast"
)

// StatsSource is what NewCollector needs from a broker: its cumulative
// counters (shardcast.StatsSource). NewCollector exports the optional interfaces
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

// Options tune a Collector. The zero value exports the broker, latency
// and per-node families with classic histogram buckets.
type Options struct {
	// ConstLabels are added to every metric, for example
	// {"engine": "cluster"}, or {"broker": "chat"} to tell apart two
	// brokers of one process registered in one registry.
	ConstLabels prometheus.Labels

	// Buckets are the upper bounds, in seconds, of the classic buckets of
	// shardcast_lag_seconds and shardcast_handler_seconds. Nil means
	// DefaultBuckets. They are sorted and deduplicated; bounds that are
	// not positive and finite are dropped (+Inf is always implied).
	//
	// A bound that falls inside one of the broker's own buckets (each at
	// most ~3.1% wide) counts only the buckets entirely below it, so its
	// count can be short by that bucket's durations. DefaultBuckets are
	// bounds of the broker's buckets and exact.
	Buckets []float64

	// NativeHistograms adds a native (sparse) histogram to each latency
	// histogram, next to its classic buckets, for Prometheus servers that
	// scrape them (protobuf exposition; the text format shows the classic
	// buckets only). It uses schema NativeSchema, 8 buckets per power of
	// two (~9% wide); each of the broker's buckets goes whole into the
	// native bucket that holds its midpoint, durations below
	// shardcast.HistogramMin into the zero bucket (threshold
	// HistogramMin), and those of HistogramMax or more into the bucket
	// holding HistogramMax.
	NativeHistograms bool

	// OmitNodes leaves out the shardcast_node_* families. Their
	// cardinality is the number of Redis instances or masters.
	OmitNodes bool

	// Partitions adds the shardcast_partition_* families, one series per
	// partition and family (128 partitions by default), if the broker
	// implements PartitionStatsSource. Off by default for that
	// cardinality.
	Partitions bool

	// HotChannels adds shardcast_hot_channel_messages_per_second and
	// shardcast_hot_channel_share, labelled channel, direction ("in",
	// "out") and node, for the busiest channels of the broker's last
	// complete hot-channel window, if the broker implements
	// HotChannelsSource: at most shardcast.Options.HotTopK series each (32
	// by default), estimated from sampled messages. Off by default: the
	// channel label takes a new value for every channel that is ever
	// among the busiest, and each stays a series in Prometheus's memory
	// for a while after it left the list.
	HotChannels bool

	// Events, if set, is exported as shardcast_events_total{kind}. Chain
	// Events.OnEvent into the broker's shardcast.Options.OnEvent.
	Events *Events
}

// NativeSchema is the schema of the native histograms Options
// .NativeHistograms adds: bucket bounds grow by 2^(1/8), about 9%, a few
// times the width of the broker's own buckets so that moving each of them
// whole into one native bucket distorts little.
const NativeSchema = 3

// DefaultBuckets returns the default bucket bounds in seconds,
// shardcast.HistogramExportBounds: shardcast.HistogramMin (10µs), every
// power of two of nanoseconds between it and shardcast.HistogramMax
// (16.384µs, …, 34.36s), and HistogramMax (60s), 24 bounds, each one a
// bound of the broker's own buckets, so their counts are exact.
func DefaultBuckets() []float64 { return shardcast.HistogramExportBounds() }

// normalBuckets sorts, deduplicates and filters bounds as Options.Buckets
// documents, and returns them with their durations.
func normalBuckets(bounds []float64) ([]float64, []time.Duration) {
	if bounds == nil {
		bounds = DefaultBuckets()
	}
	var out []float64
	for _, b := range bounds {
		if b > 0 && !math.IsInf(b, 0) && !math.IsNaN(b) {
			out = append(out, b)
		}
	}
	slices.Sort(out)
	out = slices.Compact(out)
	ds := make([]time.Duration, len(out))
	for i, b := range out {
		if b*1e9 >= math.MaxInt64 {
			ds[i] = math.MaxInt64
		} else {
			ds[i] = time.Duration(math.Round(b * 1e9))
		}
	}
	return out, ds
}

// Collector is a prometheus.Collector over one broker. Every Collect reads
// the broker's counters afresh (Latency snapshots allocate a few tens of
// kilobytes, once per scrape); the Collector keeps no state of its own
// besides its Options. It is safe for concurrent use.
type Collector struct {
	stats      StatsSource
	latency    LatencySource        // nil if the broker has none
	nodes      NodeStatsSource      // nil if absent or omitted
	partitions PartitionStatsSource // nil if absent or not asked for
	hot        HotChannelsSource    // nil if absent or not asked for
	events     *Events

	bounds   []float64
	boundsNs []time.Duration
	native   bool

	brokerDescs    []statMetric
	lag, handler   *prometheus.Desc
	negative       *prometheus.Desc
	negativeSecs   *prometheus.Desc
	nodeDescs      []nodeMetric
	partitionDescs []partitionMetric
	partitionInfo  *prometheus.Desc
	hotRate        *prometheus.Desc
	hotShare       *prometheus.Desc
	eventsDesc     *prometheus.Desc
}

var _ prometheus.Collector = (*Collector)(nil)

type statMetric struct {
	desc  *prometheus.Desc
	typ   prometheus.ValueType
	value func(shardcast.Stats) float64
}

type nodeMetric struct {
	desc  *prometheus.Desc
	value func(shardcast.NodeStats) float64
}

type partitionMetric struct {
	desc  *prometheus.Desc
	typ   prometheus.ValueType
	value func(shardcast.PartitionStats) float64
}

// NewCollector returns a Collector over b. It exports b's Stats, and the
// families of the optional interfaces b implements (LatencySource,
// NodeStatsSource, PartitionStatsSource, HotChannelsSource) as opts allows. A nil b yields a
// Collector that exports nothing.
func NewCollector(b StatsSource, opts Options) *Collector {
	c := &Collector{stats: b, events: opts.Events, native: opts.NativeHistograms}
	c.bounds, c.boundsNs = normalBuckets(opts.Buckets)
	if b != nil {
		c.latency, _ = b.(LatencySource)
		if !opts.OmitNodes {
			c.nodes, _ = b.(NodeStatsSource)
		}
		if opts.Partitions {
			c.partitions, _ = b.(PartitionStatsSource)
		}
		if opts.HotChannels {
			c.hot, _ = b.(HotChannelsSource)
		}
	}
	cl := opts.ConstLabels
	desc := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("shardcast_"+name, help, labels, cl)
	}
	u64 := func(v uint64) float64 { return float64(v) }

	if b != nil {
		c.brokerDescs = []statMetric{
			{desc("published_total", "Publish calls Redis accepted."), prometheus.CounterValue,
				func(s shardcast.Stats) float64 { return u64(s.Published) }},
			{desc("received_total", "Messages read from Redis."), prometheus.CounterValue,
				func(s shardcast.Stats) float64 { return u64(s.Received) }},
			{desc("delivered_total", "Messages the handler returned from."), prometheus.CounterValue,
				func(s shardcast.Stats) float64 { return u64(s.Delivered) }},
			{desc("dropped_total", "Messages lost to full worker queues."), prometheus.CounterValue,
				func(s shardcast.Stats) float64 { return u64(s.Dropped) }},
			{desc("bad_frames_total", "Received messages that were not envelopes (delivered as they are)."), prometheus.CounterValue,
				func(s shardcast.Stats) float64 { return u64(s.BadFrames) }},
			{desc("stale_total", "Messages dropped because they arrived on a connection their partition had moved away from."), prometheus.CounterValue,
				func(s shardcast.Stats) float64 { return u64(s.Stale) }},
			{desc("reconnects_total", "Subscribe connections re-established after a loss."), prometheus.CounterValue,
				func(s shardcast.Stats) float64 { return u64(s.Reconnects) }},
			{desc("channels", "Channels subscribed now."), prometheus.GaugeValue,
				func(s shardcast.Stats) float64 { return float64(s.Channels) }},
			{desc("queue_depth", "Messages waiting in worker queues now, summed over workers."), prometheus.GaugeValue,
				func(s shardcast.Stats) float64 { return float64(s.QueueDepth) }},
			{desc("queue_high_water", "Deepest any one worker queue has been since the broker started."), prometheus.GaugeValue,
				func(s shardcast.Stats) float64 { return float64(s.QueueHighWater) }},
		}
	}
	if c.latency != nil {
		c.lag = desc("lag_seconds", "Time from Publish (the publisher's clock) to a worker taking the message off its queue; negative lags are in shardcast_lag_negative_total.")
		c.handler = desc("handler_seconds", "Time handler calls took.")
		c.negative = desc("lag_negative_total", "Messages whose lag was negative: the publisher's clock is ahead of the subscriber's.")
		c.negativeSecs = desc("lag_negative_seconds_total", "Total magnitude of the negative lags, each counted as at most shardcast.HistogramMax.")
	}
	if c.nodes != nil {
		c.nodeDescs = []nodeMetric{
			{desc("node_published_total", "Publishes the node accepted on the broker's publishing connection.", "node"),
				func(s shardcast.NodeStats) float64 { return u64(s.Published) }},
			{desc("node_received_total", "Messages read on the broker's subscribe connections to the node.", "node"),
				func(s shardcast.NodeStats) float64 { return u64(s.Received) }},
			{desc("node_dropped_total", "Messages from the node lost to full worker queues.", "node"),
				func(s shardcast.NodeStats) float64 { return u64(s.Dropped) }},
			{desc("node_bad_frames_total", "Messages from the node that were not envelopes.", "node"),
				func(s shardcast.NodeStats) float64 { return u64(s.BadFrames) }},
			{desc("node_stale_total", "Messages from the node dropped after their partition moved away.", "node"),
				func(s shardcast.NodeStats) float64 { return u64(s.Stale) }},
			{desc("node_reconnects_total", "Subscribe connections to the node re-established after a loss.", "node"),
				func(s shardcast.NodeStats) float64 { return u64(s.Reconnects) }},
			{desc("node_resubscribe_commands_total", "Subscribe commands sent to the node to restore subscriptions.", "node"),
				func(s shardcast.NodeStats) float64 { return u64(s.ResubscribeCommands) }},
			{desc("node_down_seconds_total", "Time the broker's subscribe connections to the node have been down, the current outage included.", "node"),
				func(s shardcast.NodeStats) float64 { return s.Down.Seconds() }},
		}
	}
	if c.partitions != nil {
		c.partitionDescs = []partitionMetric{
			{desc("partition_channels", "Channels subscribed in the partition now.", "partition"), prometheus.GaugeValue,
				func(s shardcast.PartitionStats) float64 { return float64(s.Channels) }},
			{desc("partition_received_total", "Messages of the partition read from Redis.", "partition"), prometheus.CounterValue,
				func(s shardcast.PartitionStats) float64 { return u64(s.Received) }},
			{desc("partition_dropped_total", "Messages of the partition lost to full worker queues.", "partition"), prometheus.CounterValue,
				func(s shardcast.PartitionStats) float64 { return u64(s.Dropped) }},
			{desc("partition_bad_frames_total", "Messages of the partition that were not envelopes.", "partition"), prometheus.CounterValue,
				func(s shardcast.PartitionStats) float64 { return u64(s.BadFrames) }},
			{desc("partition_stale_total", "Messages of the partition dropped as stale after a move.", "partition"), prometheus.CounterValue,
				func(s shardcast.PartitionStats) float64 { return u64(s.Stale) }},
			{desc("partition_interrupted_seconds_total", "Time the partition's subscriptions have been interrupted, the current interruption included.", "partition"), prometheus.CounterValue,
				func(s shardcast.PartitionStats) float64 { return s.Interrupted.Seconds() }},
		}
		c.partitionInfo = desc("partition_info", "Always 1: the master that carries the partition now (absent while its slot has no master).", "partition", "master")
	}
	if c.hot != nil {
		c.hotRate = desc("hot_channel_messages_per_second", "Estimated messages per second of one of the busiest channels in the broker's last complete hot-channel window.", "channel", "direction", "node")
		c.hotShare = desc("hot_channel_share", "The channel's share, from 0 to 1, of the messages the broker exchanged with the node in that direction during the window.", "channel", "direction", "node")
	}
	if c.events != nil {
		c.eventsDesc = desc("events_total", "Events the broker raised, by kind.", "kind")
	}
	return c
}

// Describe sends the descriptors of every family the Collector can
// export, fixed at NewCollector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range c.brokerDescs {
		ch <- m.desc
	}
	if c.latency != nil {
		ch <- c.lag
		ch <- c.handler
		ch <- c.negative
		ch <- c.negativeSecs
	}
	for _, m := range c.nodeDescs {
		ch <- m.desc
	}
	for _, m := range c.partitionDescs {
		ch <- m.desc
	}
	if c.partitionInfo != nil {
		ch <- c.partitionInfo
	}
	if c.hot != nil {
		ch <- c.hotRate
		ch <- c.hotShare
	}
	if c.eventsDesc != nil {
		ch <- c.eventsDesc
	}
}

// Collect reads the broker's counters and sends them as metrics.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	if c.stats != nil {
		s := c.stats.Stats()
		for _, m := range c.brokerDescs {
			ch <- constMetric(m.desc, m.typ, m.value(s))
		}
	}
	if c.latency != nil {
		c.collectLatency(ch)
	}
	if c.nodes != nil {
		c.collectNodes(ch)
	}
	if c.partitions != nil {
		c.collectPartitions(ch)
	}
	if c.hot != nil {
		c.collectHot(ch)
	}
	if c.eventsDesc != nil {
		collectEvents(c.events, ch, c.eventsDesc)
	}
}

func (c *Collector) collectLatency(ch chan<- prometheus.Metric) {
	ls := c.latency.Latency()
	ch <- c.histogram(c.lag, ls.Lag)
	ch <- c.histogram(c.handler, ls.HandlerTime)
	ch <- constMetric(c.negative, prometheus.CounterValue, float64(ls.Lag.Negative))
	ch <- constMetric(c.negativeSecs, prometheus.CounterValue, -ls.Lag.NegativeSum.Seconds())
}

func (c *Collector) collectNodes(ch chan<- prometheus.Metric) {
	// One series per address: should an engine ever list an address
	// twice, its counters are added up rather than exported as duplicate
	// series, which would fail the whole scrape.
	nodes := c.nodes.NodeStats()
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
		for _, m := range c.nodeDescs {
			ch <- constMetric(m.desc, prometheus.CounterValue, m.value(n), n.Addr)
		}
	}
}

func (c *Collector) collectPartitions(ch chan<- prometheus.Metric) {
	seen := make(map[int]bool)
	for _, p := range c.partitions.PartitionStats() {
		if seen[p.Partition] {
			continue
		}
		seen[p.Partition] = true
		label := strconv.Itoa(p.Partition)
		for _, m := range c.partitionDescs {
			ch <- constMetric(m.desc, m.typ, m.value(p), label)
		}
		if p.Master != "" {
			ch <- constMetric(c.partitionInfo, prometheus.GaugeValue, 1, label, p.Master)
		}
	}
}

func (c *Collector) collectHot(ch chan<- prometheus.Metric) {
	// One series per channel, direction and node: a list that named one
	// twice would otherwise fail the scrape with duplicate series.
	seen := make(map[[3]string]bool)
	for _, h := range c.hot.HotChannels() {
		labels := [3]string{h.Channel, h.Direction.String(), h.Node}
		if seen[labels] {
			continue
		}
		seen[labels] = true
		ch <- constMetric(c.hotRate, prometheus.GaugeValue, h.Rate, labels[:]...)
		ch <- constMetric(c.hotShare, prometheus.GaugeValue, h.Share, labels[:]...)
	}
}

// constMetric is prometheus.NewConstMetric that cannot panic: an error (a
// bad ConstLabels name, which Register reports too) becomes an invalid
// metric, which fails the scrape with that error.
func constMetric(desc *prometheus.Desc, typ prometheus.ValueType, v float64, labels ...string) prometheus.Metric {
	m, err := prometheus.NewConstMetric(desc, typ, v, labels...)
	if err != nil {
		return prometheus.NewInvalidMetric(desc, err)
	}
	return m
}
