package shardcastotel

import (
	"errors"
	"math"

	"github.com/shardcast/shardcast"
	"go.opentelemetry.io/otel/metric"
)

// kind is the OpenTelemetry instrument an observed figure becomes.
type kind uint8

const (
	counter kind = iota // monotonic: Int64ObservableCounter
	updown              // additive, goes both ways: Int64ObservableUpDownCounter
	gauge               // neither: Int64ObservableGauge
)

// spec names one instrument.
type spec struct {
	name, unit, desc string
	kind             kind
}

// intStat is an instrument over one of Stats' fields.
type intStat struct {
	inst  metric.Int64Observable
	value func(shardcast.Stats) int64
}

// intNode and floatNode are instruments over one of NodeStats' fields.
type intNode struct {
	inst  metric.Int64Observable
	value func(shardcast.NodeStats) int64
}

type floatNode struct {
	inst  metric.Float64Observable
	value func(shardcast.NodeStats) float64
}

// intPartition and floatPartition are instruments over one of
// PartitionStats' fields.
type intPartition struct {
	inst  metric.Int64Observable
	value func(shardcast.PartitionStats) int64
}

type floatPartition struct {
	inst  metric.Float64Observable
	value func(shardcast.PartitionStats) float64
}

// i64 converts a counter to the int64 OpenTelemetry takes, saturating
// rather than wrapping.
func i64(v uint64) int64 {
	if v > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(v)
}

// builder creates the instruments on one Meter and keeps the first error.
type builder struct {
	meter       metric.Meter
	observables []metric.Observable
	err         error
}

func (b *builder) int64(s spec) metric.Int64Observable {
	var inst metric.Int64Observable
	var err error
	opts := []metric.InstrumentOption{metric.WithUnit(s.unit), metric.WithDescription(s.desc)}
	switch s.kind {
	case counter:
		inst, err = b.meter.Int64ObservableCounter(s.name, int64CounterOptions(opts)...)
	case updown:
		inst, err = b.meter.Int64ObservableUpDownCounter(s.name, int64UpDownOptions(opts)...)
	default:
		inst, err = b.meter.Int64ObservableGauge(s.name, int64GaugeOptions(opts)...)
	}
	b.add(inst, err)
	return inst
}

// add keeps err and inst, which a Meter returns even on most errors.
func (b *builder) add(inst metric.Observable, err error) {
	b.err = errors.Join(b.err, err)
	if inst != nil {
		b.observables = append(b.observables, inst)
	}
}

// float64Counter creates a Float64ObservableCounter: the durations, in
// seconds.
func (b *builder) float64Counter(s spec) metric.Float64Observable {
	inst, err := b.meter.Float64ObservableCounter(s.name, metric.WithUnit(s.unit), metric.WithDescription(s.desc))
	b.add(inst, err)
	return inst
}

func (b *builder) histogram(s spec, bounds []float64) metric.Float64Histogram {
	h, err := b.meter.Float64Histogram(s.name, metric.WithUnit(s.unit), metric.WithDescription(s.desc),
		metric.WithExplicitBucketBoundaries(bounds...))
	b.err = errors.Join(b.err, err)
	return h
}

func int64CounterOptions(in []metric.InstrumentOption) []metric.Int64ObservableCounterOption {
	out := make([]metric.Int64ObservableCounterOption, len(in))
	for i, o := range in {
		out[i] = o
	}
	return out
}

func int64UpDownOptions(in []metric.InstrumentOption) []metric.Int64ObservableUpDownCounterOption {
	out := make([]metric.Int64ObservableUpDownCounterOption, len(in))
	for i, o := range in {
		out[i] = o
	}
	return out
}

func int64GaugeOptions(in []metric.InstrumentOption) []metric.Int64ObservableGaugeOption {
	out := make([]metric.Int64ObservableGaugeOption, len(in))
	for i, o := range in {
		out[i] = o
	}
	return out
}

// statsInstruments creates the instruments over Stats.
func (b *builder) statsInstruments() []intStat {
	return []intStat{
		{b.int64(spec{"shardcast.published.messages", "{message}", "Publish calls Redis accepted.", counter}),
			func(s shardcast.Stats) int64 { return i64(s.Published) }},
		{b.int64(spec{"shardcast.received.messages", "{message}", "Messages read from Redis.", counter}),
			func(s shardcast.Stats) int64 { return i64(s.Received) }},
		{b.int64(spec{"shardcast.delivered.messages", "{message}", "Messages the handler returned from.", counter}),
			func(s shardcast.Stats) int64 { return i64(s.Delivered) }},
		{b.int64(spec{"shardcast.dropped.messages", "{message}", "Messages lost to full worker queues.", counter}),
			func(s shardcast.Stats) int64 { return i64(s.Dropped) }},
		{b.int64(spec{"shardcast.bad_frames", "{message}", "Received messages that were not envelopes (delivered as they are).", counter}),
			func(s shardcast.Stats) int64 { return i64(s.BadFrames) }},
		{b.int64(spec{"shardcast.stale.messages", "{message}", "Messages dropped because they arrived on a connection their partition had moved away from.", counter}),
			func(s shardcast.Stats) int64 { return i64(s.Stale) }},
		{b.int64(spec{"shardcast.reconnects", "{reconnect}", "Subscribe connections re-established after a loss.", counter}),
			func(s shardcast.Stats) int64 { return i64(s.Reconnects) }},
		{b.int64(spec{"shardcast.channels", "{channel}", "Channels subscribed now.", updown}),
			func(s shardcast.Stats) int64 { return int64(s.Channels) }},
		{b.int64(spec{"shardcast.queue.depth", "{message}", "Messages waiting in worker queues now, summed over workers.", updown}),
			func(s shardcast.Stats) int64 { return int64(s.QueueDepth) }},
		{b.int64(spec{"shardcast.queue.high_water", "{message}", "Deepest any one worker queue has been since the broker started.", gauge}),
			func(s shardcast.Stats) int64 { return int64(s.QueueHighWater) }},
	}
}

// latencyInstruments are the two histograms and the negative-lag
// counters.
type latencyInstruments struct {
	lag, handler histogramFeed
	negative     metric.Int64Observable
	negativeTime metric.Float64Observable
}

func (b *builder) latencyInstruments(bounds []float64) *latencyInstruments {
	return &latencyInstruments{
		lag: histogramFeed{hist: b.histogram(spec{name: "shardcast.lag.duration", unit: "s",
			desc: "Time from Publish (the publisher's clock) to a worker taking the message off its queue; negative lags are in shardcast.lag.negative.messages."}, bounds)},
		handler: histogramFeed{hist: b.histogram(spec{name: "shardcast.handler.duration", unit: "s",
			desc: "Time handler calls took (calls under 2µs sampled)."}, bounds)},
		negative: b.int64(spec{"shardcast.lag.negative.messages", "{message}",
			"Messages whose lag was negative: the publisher's clock is ahead of the subscriber's.", counter}),
		negativeTime: b.float64Counter(spec{name: "shardcast.lag.negative.time", unit: "s",
			desc: "Total magnitude of the negative lags, each counted as at most shardcast.HistogramMax."}),
	}
}

// nodeInstruments creates the instruments over NodeStats.
func (b *builder) nodeInstruments() ([]intNode, floatNode) {
	ints := []intNode{
		{b.int64(spec{"shardcast.node.published.messages", "{message}", "Publishes the node accepted on the broker's publishing connection.", counter}),
			func(s shardcast.NodeStats) int64 { return i64(s.Published) }},
		{b.int64(spec{"shardcast.node.received.messages", "{message}", "Messages read on the broker's subscribe connections to the node.", counter}),
			func(s shardcast.NodeStats) int64 { return i64(s.Received) }},
		{b.int64(spec{"shardcast.node.dropped.messages", "{message}", "Messages from the node lost to full worker queues.", counter}),
			func(s shardcast.NodeStats) int64 { return i64(s.Dropped) }},
		{b.int64(spec{"shardcast.node.bad_frames", "{message}", "Messages from the node that were not envelopes.", counter}),
			func(s shardcast.NodeStats) int64 { return i64(s.BadFrames) }},
		{b.int64(spec{"shardcast.node.stale.messages", "{message}", "Messages from the node dropped after their partition moved away.", counter}),
			func(s shardcast.NodeStats) int64 { return i64(s.Stale) }},
		{b.int64(spec{"shardcast.node.reconnects", "{reconnect}", "Subscribe connections to the node re-established after a loss.", counter}),
			func(s shardcast.NodeStats) int64 { return i64(s.Reconnects) }},
		{b.int64(spec{"shardcast.node.resubscribe.commands", "{command}", "Subscribe commands sent to the node to restore subscriptions.", counter}),
			func(s shardcast.NodeStats) int64 { return i64(s.ResubscribeCommands) }},
	}
	down := floatNode{b.float64Counter(spec{name: "shardcast.node.down.time", unit: "s",
		desc: "Time the broker's subscribe connections to the node have been down, the current outage included."}),
		func(s shardcast.NodeStats) float64 { return s.Down.Seconds() }}
	return ints, down
}

// partitionInstruments creates the instruments over PartitionStats, and
// shardcast.partition.owner.
func (b *builder) partitionInstruments() ([]intPartition, floatPartition, metric.Int64Observable) {
	ints := []intPartition{
		{b.int64(spec{"shardcast.partition.channels", "{channel}", "Channels subscribed in the partition now.", updown}),
			func(s shardcast.PartitionStats) int64 { return int64(s.Channels) }},
		{b.int64(spec{"shardcast.partition.received.messages", "{message}", "Messages of the partition read from Redis.", counter}),
			func(s shardcast.PartitionStats) int64 { return i64(s.Received) }},
		{b.int64(spec{"shardcast.partition.dropped.messages", "{message}", "Messages of the partition lost to full worker queues.", counter}),
			func(s shardcast.PartitionStats) int64 { return i64(s.Dropped) }},
		{b.int64(spec{"shardcast.partition.bad_frames", "{message}", "Messages of the partition that were not envelopes.", counter}),
			func(s shardcast.PartitionStats) int64 { return i64(s.BadFrames) }},
		{b.int64(spec{"shardcast.partition.stale.messages", "{message}", "Messages of the partition dropped as stale after a move.", counter}),
			func(s shardcast.PartitionStats) int64 { return i64(s.Stale) }},
	}
	interrupted := floatPartition{b.float64Counter(spec{name: "shardcast.partition.interrupted.time", unit: "s",
		desc: "Time the partition's subscriptions have been interrupted, the current interruption included."}),
		func(s shardcast.PartitionStats) float64 { return s.Interrupted.Seconds() }}
	owner := b.int64(spec{"shardcast.partition.owner", "1",
		"Always 1: the master that carries the partition now (absent while its slot has no master).", gauge})
	return ints, interrupted, owner
}

// hotInstruments creates the two hot-channel gauges.
func (b *builder) hotInstruments() (rate, share metric.Float64Observable) {
	gauge := func(s spec) metric.Float64Observable {
		inst, err := b.meter.Float64ObservableGauge(s.name, metric.WithUnit(s.unit), metric.WithDescription(s.desc))
		b.add(inst, err)
		return inst
	}
	rate = gauge(spec{name: "shardcast.hot_channel.rate", unit: "{message}/s",
		desc: "Estimated messages per second of one of the busiest channels in the broker's last complete hot-channel window."})
	share = gauge(spec{name: "shardcast.hot_channel.share", unit: "1",
		desc: "The channel's share, from 0 to 1, of the messages the broker exchanged with the node in that direction during the window."})
	return rate, share
}

// eventsInstrument creates shardcast.events.
func (b *builder) eventsInstrument() metric.Int64Observable {
	return b.int64(spec{"shardcast.events", "{event}", "Events the broker raised, by kind.", counter})
}
