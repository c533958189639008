package main

import "fmt"

// mapIntro is the map section's method paragraph.
func mapIntro() string {
	return fmt.Sprintf("Issue 43. %d nodes in the benchmark process, each a `centrifuge.Node` (not run: each map broker gets a handler "+
		"that counts the live updates it delivers, in place of the node node.Run would register) with a map broker over Redis "+
		"connections of its own: `%s` is contrib/centrifugebroker's `NewMapBroker` (default `MapConfig`: expired entries swept "+
		"every second) over a `Broker` of the cluster engine (%d partitions) on the cluster, of the sharded engine on the standalone "+
		"instance; `%s` is Centrifuge v0.40.1's `NewRedisMapBroker` (default config: its cleanup worker every second) over one "+
		"`NewRedisShard`, on the cluster with `ClusterAddresses`, `NumShardedPubSubPartitions` %d and `UsePrecomputedPartitionTags`, "+
		"as the Centrifuge end-to-end section configures its `RedisBroker`, on the standalone instance with `Address`. Every map "+
		"channel is *recoverable* (a stream beside the state; Centrifuge's default stream size 100, stream TTL 1 min, meta TTL 10 "+
		"min) with `KeyTTL` %s, and every node is subscribed to all %d of them, so that each publication is delivered to each node "+
		"(*live/op*: the live updates the nodes' handlers received in the window per call; *live missed*: of the updates owed for "+
		"every successful publish of a run, the fill's included, one per node, those not received 5 s after its last call, summed "+
		"over the rounds). Before every run's window the workers "+
		"write all %d keys of every channel (%d-byte values); then %d closed-loop goroutines, goroutine *g* on node *g mod %d*, "+
		"make one kind of call per run over every channel in turn: *publish* is `Publish` of the channel's next key (a keyed "+
		"replace, appended to the stream and published), *state* is `ReadState` with `Limit` %d (a client's first page: the "+
		"whole state). Every run starts the nodes afresh, calls for %s unmeasured and %s measured; *ops/s* counts calls started in "+
		"the window that returned without error; latency is per call; *client CPU/op* is getrusage of the whole process per call "+
		"(the deliveries and both brokers' expiry work included); *Redis CPU/op* sums INFO used_cpu_sys+used_cpu_user over the "+
		"masters; *client allocs/op* counts the process's allocations per call, *GC* is the runtime's estimate of its collector's "+
		"share of the process's Go CPU time; the `-heap` block (%d MiB) is held through every run, and one run that is not "+
		"measured goes first. A suppressed publish or a state read with fewer entries than written counts as *short*; *failed* "+
		"counts calls that returned an error. The brokers run interleaved, %d rounds per call and topology; each column is the "+
		"median over the rounds.\n\n",
		cfg.mapNodes, centAdapter, centPartitions, centRedis, centPartitions, mapKeyTTL, cfg.mapChannels, cfg.mapKeys, cfg.mapPayload,
		cfg.mapWorkers, cfg.mapNodes, mapStatePage, cfg.warmup, cfg.duration, cfg.heap, cfg.rounds)
}

// mapRatioNote introduces the ratio table.
const mapRatioNote = "Ratios, contrib/centrifugebroker / Centrifuge's RedisMapBroker, of the medians above (below 1 is " +
	"less for the adapter, except ops/s); *ops/s per round* is the range of the same-round ratios.\n\n"

// mapConnsNote introduces the connection table.
func mapConnsNote() string {
	return fmt.Sprintf("\nConnections the %d nodes hold on each master for their map brokers, every node subscribed to all %d map "+
		"channels, from CLIENT LIST at the end of every window minus those there before the nodes started (medians over the runs), "+
		"by kind: *subscribed* hold a subscription, *commands* last ran a script (or another command a publishing connection "+
		"carries), *idle* ran nothing since their handshake or a PING. The adapter's map broker runs its scripts on its Broker's "+
		"publishing connection to the channel's node and carries the map channels' publications on the Broker's subscriptions: "+
		"per node and master one subscribe and one publishing connection, however many map channels and partitions (the sharded "+
		"engine also keeps the layout record's heartbeat on a connection of its own to the control instance). Centrifuge's map "+
		"broker subscribes on one dedicated connection per partition (%d per node on the cluster, spread over the masters by the "+
		"partitions' hash tags; one on a standalone instance) beside its RedisShard's rueidis pipelines (2^⌊log2 GOMAXPROCS⌋ per "+
		"node, at most 4: %d here).\n\n", cfg.mapNodes, cfg.mapChannels, centPartitions, rueidisPipes(clientProcs))
}
