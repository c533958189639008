package shardcast

// StatsSource is what a metrics exporter needs from a broker: its
// cumulative counters. Both engines' brokers implement it, and so do the
// optional interfaces below where the engine has more to say.
type StatsSource interface {
	Stats() Stats
}

// LatencySource is implemented by brokers that keep lag and handler-time
// histograms (both engines do).
type LatencySource interface {
	Latency() LatencyStats
}

// NodeStatsSource is implemented by brokers that count per Redis instance
// or master (both engines do).
type NodeStatsSource interface {
	NodeStats() []NodeStats
}

// PartitionStatsSource is implemented by brokers that count per partition
// (the cluster engine does).
type PartitionStatsSource interface {
	PartitionStats() []PartitionStats
}

// HotChannelsSource is implemented by brokers that detect hot channels
// (both engines do; see Options.HotSampleRate).
type HotChannelsSource interface {
	HotChannels() []HotChannel
}
