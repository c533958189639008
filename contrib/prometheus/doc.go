// Package shardcastprom exports a shardcast broker's counters and
// histograms to Prometheus.
//
// NewCollector wraps any broker with a Stats method; the families of the
// optional interfaces it also implements (LatencySource, NodeStatsSource,
// PartitionStatsSource, HotChannelsSource) come along, so both engines, and engines to come,
// fit the same Collector. It reads the broker at scrape time and keeps no
// copy of its own:
//
//	var events shardcastprom.Events // shardcast_events_total{kind}
//	b, err := cluster.New(cluster.Config{
//		Addrs:   seeds,
//		Options: shardcast.Options{Handler: h, OnEvent: events.Chain(myOnEvent)},
//	})
//	...
//	prometheus.MustRegister(shardcastprom.NewCollector(b, shardcastprom.Options{
//		ConstLabels: prometheus.Labels{"engine": "cluster"},
//		Events:      &events,
//	}))
//
// Families, all prefixed shardcast_:
//
//   - from Stats: published_total, received_total, delivered_total,
//     dropped_total, bad_frames_total, stale_total, reconnects_total
//     (counters); channels, queue_depth, queue_high_water (gauges);
//   - from Latency: lag_seconds and handler_seconds (histograms, classic
//     buckets from Options.Buckets, native ones too with
//     Options.NativeHistograms); lag_negative_total and
//     lag_negative_seconds_total for lags below zero (clock skew), which
//     no histogram holds;
//   - from NodeStats, labelled node (host:port): node_published_total,
//     node_received_total, node_dropped_total, node_bad_frames_total,
//     node_stale_total, node_reconnects_total,
//     node_resubscribe_commands_total, node_down_seconds_total; left out
//     with Options.OmitNodes;
//   - from PartitionStats, labelled partition, only with Options.Partitions:
//     partition_channels, partition_received_total,
//     partition_dropped_total, partition_bad_frames_total,
//     partition_stale_total, partition_interrupted_seconds_total, and
//     partition_info{partition,master} (always 1);
//   - from HotChannels, labelled channel, direction ("in", "out") and
//     node, only with Options.HotChannels: hot_channel_messages_per_second
//     and hot_channel_share (gauges), for the busiest channels of the last
//     complete hot-channel window;
//   - from Options.Events: events_total{kind}, kind being
//     shardcast.EventKind's String ("interrupted", "restored", "dropped",
//     "topology_changed", "error", "hot_channel", "relayout"), each
//     exported at 0 before its first event.
//
// A Grafana dashboard over these families ships beside the package, in
// dashboard/shardcast.json (import it and pick the Prometheus data
// source): published, received and delivered rates, lag and handler-time
// percentiles, drops, interruptions and restorations, outage time per
// Redis node, reconnects, queue depth, channels, hot-channel events, the
// hottest channels (with Options.HotChannels) and the most interrupted
// partitions (with Options.Partitions). It selects scrape targets by
// their instance label; ConstLabels need no change to it. A test checks
// that every series it queries is one the Collector exports, under the
// PromQL its type needs.
//
// The package is named shardcastprom rather than prometheus so that it
// sits beside client_golang's prometheus package in one file without an
// import alias.
package shardcastprom
