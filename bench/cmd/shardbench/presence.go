package main

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// The presence scenario sets contrib/centrifugebroker's PresenceManager
// beside Centrifuge's RedisPresenceManager: closed-loop workers call
// AddPresence, Presence or PresenceStats on many channels through the
// managers of -presence-nodes nodes, on one standalone Redis and on the
// 3-master cluster, the two managers interleaved round by round.

// presResult is one presence run: one manager, one call, one topology.
type presResult struct {
	Scenario    string  `json:"scenario"`
	Topology    string  `json:"topology"`
	Manager     string  `json:"manager"`
	Op          string  `json:"op"`
	Round       int     `json:"round"`
	Nodes       int     `json:"nodes"`
	Workers     int     `json:"workers"`
	Channels    int     `json:"channels"`
	Clients     int     `json:"clients_per_channel"`
	UserMapping bool    `json:"user_mapping"`
	Seconds     float64 `json:"seconds"`
	// callResult is what the run measured of the calls; a Presence or
	// PresenceStats answer with fewer entries than the workload keeps
	// counts as Short.
	callResult
}

// presTitle is the section's heading; -update finds the section by it.
const presTitle = "Presence: contrib/centrifugebroker's PresenceManager against Centrifuge's RedisPresenceManager"

// runPresence runs every call of -presence-ops on both topologies, the
// managers interleaved round by round, and builds the section.
func runPresence(ctx context.Context, e *env) (section, error) {
	sec := section{Name: "presence", Title: presTitle}
	ops, err := presOpsOf(cfg.presOps)
	if err != nil {
		return sec, err
	}
	if cfg.presNodes < 1 || cfg.presWorkers < 1 || cfg.presChannels < 1 || cfg.presClients < 1 {
		return sec, errors.New("-presence-nodes, -presence-workers, -presence-channels and -presence-clients must be positive")
	}
	rep, err := runCalls(ctx, e, callScenario[presResult]{
		name: "presence", engine: "manager", ops: ops,
		run:     presRun,
		runNote: func(r presResult, t callTopo) string { return "conns per master " + perMaster(r.Conns, t.Servers) },
		report:  presReport,
	})
	if err != nil {
		return sec, err
	}
	sec.Body = presIntro() + rep.runs + "\n" + presRatioNote + rep.ratios + "\n" + presConnsNote() + rep.conns
	return sec, nil
}

// presIntro is the section's method paragraph.
func presIntro() string {
	mapping := "without user mapping: PresenceStats loads every entry and counts them on the node"
	if cfg.presMapping {
		mapping = "with user mapping on every channel (`PresenceConfig.UserMapping`, `EnableUserMapping`): AddPresence also counts the client " +
			"per user, and PresenceStats reads both counts from Redis in one script"
	}
	return fmt.Sprintf("%d nodes in the benchmark process, each a `centrifuge.Node` (not run: nothing but presence calls goes through it) with a "+
		"presence manager over Redis connections of its own: `%s` is contrib/centrifugebroker's `NewPresenceManager` over a `Broker` of the "+
		"cluster engine (%d partitions) on the cluster, of the sharded engine on the standalone instance; `%s` is Centrifuge v0.40.1's "+
		"`NewRedisPresenceManager` over one `NewRedisShard` (`ClusterAddresses` on the cluster, `Address` on the standalone instance). "+
		"Both with their default TTL (60 s), Centrifuge's `UseHashFieldTTL` off (its default; it needs Redis 7.4), %s. %d channels keep %d clients each (36-character client IDs, two clients per user, a "+
		"small ConnInfo), written before every run's window and kept so by the calls. %d closed-loop goroutines, goroutine *g* on node "+
		"*g mod %d*, make one kind of call per run over every channel in turn: *add* is AddPresence of the channel's next client (a "+
		"re-add, as a node's periodic presence update), *presence* is Presence (all %d entries back), *stats* is PresenceStats. "+
		"Every run starts the nodes afresh, calls for %s unmeasured and %s measured; *ops/s* counts calls started in the window that "+
		"returned without error; latency is per call; *client CPU/op* is getrusage of the whole process per call; *Redis CPU/op* sums INFO "+
		"used_cpu_sys+used_cpu_user over the masters; *client allocs/op* counts the process's allocations (runtime.MemStats) per call, *GC* "+
		"is the runtime's estimate of its collector's share of the process's Go CPU time; the `-heap` block (%d MiB) is held through every "+
		"run, as in the throughput section, and one run that is not measured goes first. A Presence or PresenceStats answer with fewer entries than kept counts as *short*; "+
		"*failed* counts calls that returned an error. The managers run interleaved, %d rounds per call and topology; each column is the "+
		"median over the rounds.\n\n",
		cfg.presNodes, centAdapter, centPartitions, centRedis, mapping, cfg.presChannels, cfg.presClients, cfg.presWorkers, cfg.presNodes,
		cfg.presClients, cfg.warmup, cfg.duration, cfg.heap, cfg.rounds)
}

// presRatioNote introduces the ratio table.
const presRatioNote = "Ratios, contrib/centrifugebroker / Centrifuge's RedisPresenceManager, of the medians above (below 1 is " +
	"less for the adapter, except ops/s); *ops/s per round* is the range of the same-round ratios.\n\n"

// presConnsNote introduces the connection table.
func presConnsNote() string {
	return fmt.Sprintf("\nConnections the %d nodes hold on each master for their presence managers, from CLIENT LIST at the end of "+
		"every window minus those there before the nodes started (medians over the runs), by kind: *commands* last ran a script (or "+
		"another command a publishing connection carries), *subscribed* hold a subscription, *idle* ran nothing since their "+
		"handshake or a PING. The adapter's manager runs its scripts on its Broker's publishing connection to the channel's node and "+
		"opens none of its own; what the table shows for it is the Broker's: per node and master one publishing connection, and the "+
		"subscribe connection every Broker opens for its Handler, idle here since the nodes subscribe to nothing (the sharded engine "+
		"also keeps the layout record's heartbeat on a connection of its own to the control instance). In a deployment these are the "+
		"broker's connections, and presence adds none. Centrifuge's manager uses its RedisShard's rueidis client (rueidis opens "+
		"2^⌊log2 GOMAXPROCS⌋ pipelines per node, at most 4: %d here); a node whose RedisBroker uses the same shard shares them with "+
		"the broker's commands, and the broker's sharded Pub/Sub holds one more connection per partition (see *Connections per master* "+
		"and the Centrifuge end-to-end section).\n\n", cfg.presNodes, rueidisPipes(clientProcs))
}

// presRun runs one manager's call op for warm-up + duration on t, as
// round round (0: the warm-up).
func presRun(ctx context.Context, name, op string, t callTopo, round int) (res presResult) {
	res.Scenario, res.Round = "presence", round
	res.Topology, res.Manager, res.Op = t.Name, name, op
	res.Nodes, res.Workers, res.Channels, res.Clients, res.UserMapping = cfg.presNodes, cfg.presWorkers, cfg.presChannels, cfg.presClients, cfg.presMapping
	holdHeap(cfg.heap) // touches the headroom again: see holdHeap
	base := masterConns(t.Servers)
	var nodes []*presNode
	defer func() {
		for _, nd := range nodes {
			nd.close()
		}
		settleConns(t.Servers, base)
	}()
	for range cfg.presNodes {
		nd, err := newPresNode(name, t, cfg.presMapping)
		if err != nil {
			res.Error = "start node: " + err.Error()
			return res
		}
		nodes = append(nodes, nd)
	}
	w := newPresWorkload(fmt.Sprintf("pres:%s:", name), cfg.presChannels, cfg.presClients)
	load := func(op string) callLoad {
		return callLoad{workers: cfg.presWorkers, call: func(g, i int) (bool, error) { return w.call(nodes[g%len(nodes)].pm, op, i) }}
	}
	// The fill adds every entry the calls keep.
	if err := load("add").fill(ctx, len(w.channels)*len(w.clients)); err != nil {
		res.Error = "fill: " + err.Error()
		return res
	}
	m := load(op).measure(ctx, t.Servers, base)
	res.callResult, res.Seconds = m.callResult, m.Seconds
	return res
}

// settleConns waits (at most 5 s) until the servers hold no more
// connections than base, so the next run's counts start clean.
func settleConns(servers []string, base map[string]connKinds) {
	deadline := time.Now().Add(5 * time.Second)
	for _, s := range servers {
		b := base[s]
		for {
			n, _ := clientCounts(s)
			if n <= b.pubsub+b.publish+b.other || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}
