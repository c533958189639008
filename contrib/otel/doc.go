// Package shardcastotel exports a shardcast broker's counters and
// histograms as OpenTelemetry instruments, on a MeterProvider the
// application supplies. It observes the same figures as the Prometheus
// collector of contrib/prometheus, named after the OpenTelemetry semantic
// conventions.
//
// Register wraps any broker with a Stats method; the figures of the
// optional interfaces it also implements (LatencySource, NodeStatsSource,
// PartitionStatsSource, HotChannelsSource) come along. One callback reads the broker at each
// collection; Unregister removes it:
//
//	var events shardcastotel.Events // shardcast.events{shardcast.event.kind}
//	b, err := cluster.New(cluster.Config{
//		Addrs:   seeds,
//		Options: shardcast.Options{Handler: h, OnEvent: events.Chain(myOnEvent)},
//	})
//	...
//	m, err := shardcastotel.Register(provider, b, shardcastotel.Options{Events: &events})
//	...
//	defer m.Unregister()
//
// The counters and gauges are observable instruments. The two histograms
// are synchronous Float64Histograms that the callback feeds: at each
// collection it records every duration the broker counted since the
// previous one, at the midpoint of the broker's bucket that holds it (the
// overflow bucket's just above shardcast.HistogramMax). That is one Record
// call per delivered message (and per sampled handler call), made while
// the reader collects (Options.OmitLatency spares it), and it makes the
// histograms' sums those of the midpoints, within ~1.6% of the broker's.
//
// Instruments, and the Prometheus family each matches (all Int64 but the
// durations, which are Float64 in seconds):
//
//	OpenTelemetry                          unit        instrument      Prometheus (shardcast_…)
//	shardcast.published.messages           {message}   counter         published_total
//	shardcast.received.messages            {message}   counter         received_total
//	shardcast.delivered.messages           {message}   counter         delivered_total
//	shardcast.dropped.messages             {message}   counter         dropped_total
//	shardcast.bad_frames                   {message}   counter         bad_frames_total
//	shardcast.stale.messages               {message}   counter         stale_total
//	shardcast.reconnects                   {reconnect} counter         reconnects_total
//	shardcast.channels                     {channel}   updowncounter   channels
//	shardcast.queue.depth                  {message}   updowncounter   queue_depth
//	shardcast.queue.high_water             {message}   gauge           queue_high_water
//	shardcast.lag.duration                 s           histogram       lag_seconds
//	shardcast.handler.duration             s           histogram       handler_seconds
//	shardcast.lag.negative.messages        {message}   counter         lag_negative_total
//	shardcast.lag.negative.time            s           counter         lag_negative_seconds_total
//	shardcast.node.published.messages      {message}   counter         node_published_total
//	shardcast.node.received.messages       {message}   counter         node_received_total
//	shardcast.node.dropped.messages        {message}   counter         node_dropped_total
//	shardcast.node.bad_frames              {message}   counter         node_bad_frames_total
//	shardcast.node.stale.messages          {message}   counter         node_stale_total
//	shardcast.node.reconnects              {reconnect} counter         node_reconnects_total
//	shardcast.node.resubscribe.commands    {command}   counter         node_resubscribe_commands_total
//	shardcast.node.down.time               s           counter         node_down_seconds_total
//	shardcast.partition.channels           {channel}   updowncounter   partition_channels
//	shardcast.partition.received.messages  {message}   counter         partition_received_total
//	shardcast.partition.dropped.messages   {message}   counter         partition_dropped_total
//	shardcast.partition.bad_frames         {message}   counter         partition_bad_frames_total
//	shardcast.partition.stale.messages     {message}   counter         partition_stale_total
//	shardcast.partition.interrupted.time   s           counter         partition_interrupted_seconds_total
//	shardcast.partition.owner              1           gauge           partition_info
//	shardcast.hot_channel.rate             {message}/s gauge           hot_channel_messages_per_second
//	shardcast.hot_channel.share            1           gauge           hot_channel_share
//	shardcast.events                       {event}     counter         events_total
//
// Attributes: Options.Attributes on every measurement (the collector's
// ConstLabels); the shardcast.node.* instruments carry server.address and
// server.port where the collector has node="host:port"; the
// shardcast.partition.* ones shardcast.partition (an int) where it has
// partition, and shardcast.partition.owner also the master's
// server.address and server.port where partition_info has master; the
// shardcast.hot_channel.* ones shardcast.channel, shardcast.direction and,
// but for a publish-only broker's publishes, the node's server.address and
// server.port where the collector has channel, direction and node;
// shardcast.events carries shardcast.event.kind, shardcast.EventKind's
// String, where events_total has kind. Each known kind is observed at 0
// before its first event.
//
// The node instruments are left out with Options.OmitNodes, the
// histograms and negative-lag counters with Options.OmitLatency; the
// partition instruments are present only with Options.Partitions, the
// hot-channel ones only with Options.HotChannels.
package shardcastotel
