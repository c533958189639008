package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/centrifugal/centrifuge"
	gocent "github.com/centrifugal/centrifuge-go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/shardcast/shardcast/bench/internal/engines"
	"github.com/shardcast/shardcast/bench/internal/measure"
	"github.com/shardcast/shardcast/cluster"
	"github.com/shardcast/shardcast/contrib/centrifugebroker"
)

// The centrifuge scenario runs whole Centrifuge servers: N nodes in this
// process, each serving WebSocket on a loopback port, and centrifuge-go
// clients connected to them round-robin. A publication goes client (or
// node) → node → Redis Cluster → every node with subscribers → client, and
// the receiving client measures latency from the stamp in the payload. The
// nodes, clients, channels and cluster are the same for both brokers; only
// node.SetBroker differs.

// Broker names of the centrifuge scenario.
const (
	centAdapter = "centrifugebroker"
	centRedis   = "centrifuge-redis"
)

// centPartitions is both brokers' partition count: shardcast's default and
// the partitions the other scenarios give Centrifuge's sharded Pub/Sub.
const centPartitions = 128

// centResult is one run of the centrifuge scenario: the throughput columns
// plus Redis connections per master, split into those holding a
// subscription (pubsub) and the rest.
type centResult struct {
	tpResult
	Broker     string `json:"broker"`
	Nodes      int    `json:"nodes"`
	Clients    int    `json:"clients"`
	Subs       int    `json:"subscriptions"`
	PublishVia string `json:"publish_via"`
	History    bool   `json:"history"`
	// PubRate is publishes per second; the CPU per publication divides
	// by the publishes made in the measured window.
	PubRate         float64        `json:"publishes_per_sec"`
	ClientCPUPerPub float64        `json:"client_cpu_ns_per_publication"`
	RedisCPUPerPub  float64        `json:"redis_cpu_ns_per_publication"`
	PubSubConns     map[string]int `json:"pubsub_connections_per_master"`
	PublishConns    map[string]int `json:"publish_connections_per_master"`
	OtherConns      map[string]int `json:"other_connections_per_master"`
	// GCShare is the runtime's estimate of the share of the process's Go
	// CPU time its collector took in the measured window and the drain;
	// LiveHeap the heap the last collection found live, without the
	// -heap block of HeapBlockMiB.
	GCShare      float64 `json:"gc_cpu_share"`
	LiveHeap     uint64  `json:"live_heap_bytes"`
	HeapBlockMiB int     `json:"heap_block_mib"`
	// NodeCPUPerPub, ClientsCPUPerPub and RuntimeCPUPerPub split the
	// process's CPU in the measured window by owner, as Go's profiler
	// sampled it (see centSide), per publication: the Centrifuge nodes
	// with their brokers; the centrifuge-go clients with, on the client
	// path, the publishers driving them; the runtime's own work. Zero when
	// -cpuprofile holds the profiler.
	NodeCPUPerPub    float64 `json:"node_cpu_ns_per_publication,omitempty"`
	ClientsCPUPerPub float64 `json:"clients_cpu_ns_per_publication,omitempty"`
	RuntimeCPUPerPub float64 `json:"runtime_cpu_ns_per_publication,omitempty"`
}

// centSide is the profiler label that tells the CPU split's owners apart:
// centrifuge.go starts every node (and so its broker, its HTTP server and
// every goroutine those start) under side=node, and the clients under
// side=clients. The publishers call Node.Publish on the server path, node
// work, so they run under side=node there and under side=clients on the
// client path, where they drive centrifuge-go's Publish. Goroutines the
// runtime starts or runs for itself (the scheduler, the collector's
// background workers, the goroutines of timers) carry no label.
const centSide = "side"

// underSide runs f with the profiler label side=value, which every
// goroutine f starts inherits.
func underSide(ctx context.Context, value string, f func()) {
	pprof.Do(ctx, pprof.Labels(centSide, value), func(context.Context) { f() })
}

// centHistory is the history-on publish (-cent-history on): the last 100
// publications of a channel, kept a minute after its last publish.
var centHistory = centrifuge.PublishOptions{HistorySize: 100, HistoryTTL: 60 * time.Second}

// centVariant is one way the publishers publish: a path (server or client)
// and whether with history.
type centVariant struct {
	mode    string
	history bool
}

// centVariants is the plan of a run from -cent-publish and -cent-history:
// every publish path without history, then, with history, the server path
// only: Node.Publish with centHistory. History is written by the broker
// whichever path the publication came in by, so the server path measures
// what history adds without the client path's own cost.
func centVariants(publish, history string) ([]centVariant, error) {
	modes, hist := splitList(publish), splitList(history)
	if len(hist) == 1 && hist[0] == "both" {
		hist = []string{"off", "on"}
	}
	var off, on bool
	for _, h := range hist {
		switch h {
		case "off":
			off = true
		case "on":
			on = true
		default:
			return nil, fmt.Errorf("-cent-history %q: want off, on or both", history)
		}
	}
	var out []centVariant
	for _, m := range modes {
		if m != "client" && m != "server" {
			return nil, fmt.Errorf("-cent-publish %q: want server, client or both", publish)
		}
		if off {
			out = append(out, centVariant{mode: m})
		}
	}
	if on {
		out = append(out, centVariant{mode: "server", history: true})
	}
	if len(out) == 0 {
		return nil, errors.New("-cent-publish and -cent-history name no run")
	}
	return out, nil
}

// centNode is one Centrifuge server of a run.
type centNode struct {
	node  *centrifuge.Node
	shard *centrifuge.RedisShard // centRedis only
	srv   *http.Server
	url   string
}

// runCentrifuge compares Centrifuge's RedisBroker with the shardcast
// adapter under the same Centrifuge nodes and WebSocket clients, once per
// publish path (-cent-publish).
func runCentrifuge(ctx context.Context, e *env) (section, error) {
	sec := section{Name: "centrifuge", Title: "Centrifuge end to end: nodes and WebSocket clients"}
	variants, err := centVariants(cfg.centPublish, cfg.centHistory)
	if err != nil {
		return sec, err
	}
	if cfg.centNodes < 1 || cfg.centClients < 1 || cfg.centChannels < 1 || cfg.centFanout < 1 || cfg.centPublishers < 1 {
		return sec, errors.New("-cent-nodes, -cent-clients, -cent-channels, -cent-fanout and -cent-publishers must be positive")
	}
	seeds, _, servers, err := e.clusterMasters(ctx, 3)
	if err != nil {
		return sec, err
	}
	names := engineList([]string{centAdapter, centRedis, centBoundName})
	for _, n := range names {
		if n != centAdapter && n != centRedis && n != centBoundName {
			return sec, fmt.Errorf("centrifuge scenario: unknown broker %q (have %s, %s, %s)", n, centAdapter, centRedis, centBoundName)
		}
	}
	var body strings.Builder
	fmt.Fprintf(&body, "%d Centrifuge v0.40.1 nodes in the benchmark process, each serving WebSocket on its own loopback port; %d centrifuge-go v0.12.1 "+
		"clients per node (%d in all, Protobuf protocol), client *i* on node *i mod %d*. %d channels, each subscribed by %d clients, "+
		"chosen so that a channel's subscribers sit on different nodes when the fan-out is at most the node count: every publication "+
		"crosses Redis to %d nodes and reaches %d clients. One 3-master Redis Cluster without replicas, shared by both brokers; both use "+
		"%d partitions (`%s`: Centrifuge's `RedisBroker` over one `RedisShard` with `ClusterAddresses`, `NumShardedPubSubPartitions` and "+
		"`UsePrecomputedPartitionTags`, its evenly spread tag table; `%s`: contrib/centrifugebroker with `cluster.Config{Partitions: %d}`). "+
		"Only `node.SetBroker` differs between the two.\n\n",
		cfg.centNodes, cfg.centClients, cfg.centNodes*cfg.centClients, cfg.centNodes, cfg.centChannels, cfg.centFanout,
		cfg.centFanout, cfg.centFanout, centPartitions, centRedis, centAdapter, centPartitions)
	fmt.Fprintf(&body, "Publishing: %d closed-loop goroutines, round-robin over the channels, one of two ways. *server*: goroutine *g* calls `Node.Publish` "+
		"on node *g mod nodes*. *client*: goroutine *g* calls centrifuge-go's `Client.Publish` on client *g mod clients* (so publishes enter "+
		"every node over WebSocket) and waits for the reply; the node's OnPublish accepts and the node publishes through its broker. "+
		"The client path adds, per publish, a WebSocket frame each way, a server-side command dispatch, and in centrifuge-go a goroutine and "+
		"a timer per request. That cost is Centrifuge's and centrifuge-go's, the same under both brokers, and on 2 shared cores it takes CPU "+
		"the brokers would otherwise use, so the *client* rows measure the whole path and the *server* rows the brokers more directly.\n\n", cfg.centPublishers)
	fmt.Fprintf(&body, "Each run starts the nodes and clients afresh, waits until every subscription is confirmed, publishes for %s unmeasured and %s measured, "+
		"then drains. *delivered/s* counts messages stamped inside the measured window and received by a client's OnPublication; latency is "+
		"from the stamp (taken just before the publish call) to that callback; the publishers are closed-loop and keep the process's core "+
		"busy, so it is latency at saturation, queueing included, not at a fixed rate. *client CPU/msg* is getrusage of the whole process — nodes, "+
		"brokers and clients — per delivered message; *Redis CPU/msg* sums INFO used_cpu_sys+used_cpu_user over the masters. Connections "+
		"are counted with CLIENT LIST on each master (in slot order) at the end of the measured window, minus those present before the nodes "+
		"started: *pubsub* holds at least one SUBSCRIBE or SSUBSCRIBE, *publish* last ran SPUBLISH, PUBLISH, EVAL(SHA) or FCALL, or "+
		"CLUSTER SLOTS or ROLE, which the adapter's engine sends on its publishing connections (it holds no other), *other* is the rest, "+
		"such as a connection idle since its handshake. %d interleaved rounds; each column is the median over the rounds, *loss* is over all rounds.\n\n", cfg.warmup, cfg.duration, cfg.rounds)
	fmt.Fprintf(&body, "**The load generator in the node's process.** The clients share the nodes' process only because the machine has two cores; "+
		"three things keep them from billing the brokers for it. centrifuge-go starts a goroutine per request that waits the client's "+
		"ReadTimeout even after the reply came: with its 5 s default, some 60-90k of them sit parked on the client path, and every "+
		"collection scans their stacks (mark work per cycle tripled between 19k and 58k goroutines in a gctrace), which costs most the "+
		"broker whose smaller heap makes it collect most often. The clients run with ReadTimeout %s, still 20 times the worst p99.9 here. "+
		"Every run waits %s before it starts, so that the previous run's nodes (Centrifuge keeps a stopped node reachable for about a "+
		"second) are garbage by then. And one run that is not measured goes first: the first run in a "+
		"process used 5-10%% less CPU per publication than later ones of the same broker, whichever broker it was (cause not found).\n\n",
		centReadTimeout, centSettle)
	heapNote := "without a heap block"
	if cfg.heap > 0 {
		heapNote = fmt.Sprintf("with a %d MiB heap block", cfg.heap)
	}
	fmt.Fprintf(&body, "**The heap.** Go's collector runs each time the heap grows by what the last collection found live (GOGC 100), so its "+
		"CPU cost in a process depends on what else the process holds, not only on what it allocates. This process is a toy server "+
		"(%d clients, %d channels). Left alone, its live heap under the adapter is a few tens of MB, nearly all of it pointers to scan; "+
		"under Centrifuge's RedisBroker it is hundreds of MB, nearly all of it rueidis's pointer-free connection buffers (one subscribe "+
		"connection per partition, %d per node), which then stand in for the rest of a server's heap for that broker alone: its collector "+
		"runs about once in two seconds, the adapter's about ten times a second (a gctrace of one toy-heap run of each here). A production node holds its connections' buffers and state (tens "+
		"of KB per WebSocket connection), so both brokers run %s: `-heap` MiB of pointer-free memory held live through every run, "+
		"standing for the rest of a node's heap, the same for both (the throughput section's `-heap` block). *GC* is the runtime's estimate of the share of the process's Go CPU "+
		"time its collector took in the measured window and drain; *live heap* is what the last collection found live, without the block. "+
		"The *toy heap* tables at the end run the server path without the block, as a reference.\n\n",
		cfg.centNodes*cfg.centClients, cfg.centChannels, centPartitions, heapNote)
	// The first run of a process measures 5-10% less CPU per publication
	// than later ones of the same broker, whichever broker it is (cause
	// not found: not GC, not page faults, not Redis). A run that is not
	// measured takes that bonus instead of the first broker of round 1.
	progress("[centrifuge] warm-up run of %s, not measured …", names[0])
	if r := centRun(ctx, names[0], variants[0], seeds, servers); r.Error != "" {
		progress("   warm-up error: %s", r.Error)
	}
	main, err := centPass(ctx, names, variants, seeds, servers, cfg.heap, false)
	if err != nil {
		return sec, err
	}
	sec.Targets = append(sec.Targets, main.targets...)
	body.WriteString(main.body)
	if cfg.centToyHeap && cfg.heap > 0 {
		var toy []centVariant
		for _, v := range variants {
			if v.mode == "server" {
				toy = append(toy, v)
			}
		}
		if len(toy) > 0 {
			ref, err := centPass(ctx, names, toy, seeds, servers, 0, true)
			if err != nil {
				return sec, err
			}
			sec.Targets = append(sec.Targets, ref.targets...)
			fmt.Fprintf(&body, "\n### Toy heap: the server path without the heap block\n\nThe same runs, %d interleaved rounds, with nothing held "+
				"beside the nodes, clients and brokers: each broker's collector works at the pace its own heap sets. Compare the *GC* and "+
				"*live heap* columns with the tables above.\n\n", cfg.rounds)
			body.WriteString(ref.body)
		}
	}
	sec.Body = body.String()
	return sec, nil
}

// centOut is what one pass of the centrifuge scenario reports: its tables
// (Markdown) and targets.
type centOut struct {
	body    string
	targets []target
}

// centPass runs every variant over cfg.rounds interleaved rounds of each
// broker, with a pointer-free block of heapMiB held live throughout, and
// returns its tables and targets; a toy pass (no block, a reference) only
// reports the ratios the targets ask for.
func centPass(ctx context.Context, names []string, variants []centVariant, seeds, servers []string, heapMiB int, toy bool) (centOut, error) {
	var out centOut
	holdHeap(heapMiB)
	defer holdHeap(0)
	tag, status := "", metStr
	if toy {
		tag = ", toy heap"
		status = func(bool) string { return "reported" }
	}
	head := []string{"broker", "publish", "delivered/s", "p50", "p99", "p99.9", "client CPU/msg", "Redis CPU/msg", "GC", "live heap", "pubsub conns per master",
		"publish conns per master", "other conns per master", "loss", "runs"}
	var rows, rrows, hrows, hrrows, orows [][]string
	var connTarget *target
	for _, v := range variants {
		mode, label := v.mode, v.mode
		if v.history {
			label += ", history"
		}
		label += tag
		var vnames []string // the zero-cost broker runs on the client path only (see centBound)
		for _, name := range names {
			if name != centBoundName || (v.mode == "client" && !v.history && !toy) {
				vnames = append(vnames, name)
			}
		}
		runs := map[string][]centResult{}
		total, n := cfg.rounds*len(vnames), 0
		for round := 1; round <= cfg.rounds; round++ {
			for _, name := range vnames {
				if ctx.Err() != nil {
					return out, ctx.Err()
				}
				n++
				progress("[centrifuge %s %d/%d] %s, %d nodes × %d clients, round %d …", label, n, total, name, cfg.centNodes, cfg.centClients, round)
				r := centRun(ctx, name, v, seeds, servers)
				r.Scenario, r.Topology, r.Engine, r.Round, r.HeapBlockMiB = "centrifuge", "cluster-3", name, round, heapMiB
				emit(r)
				if r.Error != "" {
					progress("   error: %s", r.Error)
				} else {
					progress("   %s publishes/s, %s delivered/s, p50 %s, p99 %s, GC %.0f%%, conns per master: pubsub %s, publish %s, other %s", fmtRate(r.PubRate), fmtRate(r.Rate),
						fmtDur(time.Duration(r.P50us*1e3)), fmtDur(time.Duration(r.P99us*1e3)), 100*r.GCShare, perMaster(r.PubSubConns, servers),
						perMaster(r.PublishConns, servers), perMaster(r.OtherConns, servers))
				}
				runs[name] = append(runs[name], r)
			}
		}
		meds := map[string]centResult{}
		for _, name := range vnames {
			m := centMedian(runs[name], servers)
			m.Scenario, m.Round = "centrifuge-median", 0
			emit(m)
			meds[name] = m
			if v.history {
				hrows = append(hrows, centHistoryRow(m, len(runs[name])))
			} else {
				rows = append(rows, centRow(m, servers, len(runs[name])))
				if !toy && m.NodeCPUPerPub > 0 {
					orows = append(orows, centOwnerRow(m))
				}
			}
		}
		a, c := meds[centAdapter], meds[centRedis]
		if v.history {
			if a.Error == "" && c.Error == "" && a.PubRate > 0 && c.PubRate > 0 {
				hrrows = append(hrrows, []string{centAdapter + " / " + centRedis, ratio(a.PubRate, c.PubRate), ratio(a.Rate, c.Rate), ratio(a.P50us, c.P50us),
					ratio(a.P99us, c.P99us), ratio(a.ClientCPUPerPub, c.ClientCPUPerPub), ratio(a.RedisCPUPerPub, c.RedisCPUPerPub)})
				out.targets = append(out.targets, target{
					fmt.Sprintf("centrifuge history (issue 11)%s, server publish with HistorySize 100, HistoryTTL 60 s: publishes/s ≥ 1.3× Centrifuge's RedisBroker with the same history, %d nodes × %d WebSocket clients, 3 masters", tag, cfg.centNodes, cfg.centClients),
					fmt.Sprintf("%s (%s vs %s publishes/s)", ratio(a.PubRate, c.PubRate), fmtRate(a.PubRate), fmtRate(c.PubRate)), status(a.PubRate >= 1.3*c.PubRate)})
			}
			continue
		}
		if a.Error == "" && c.Error == "" && a.Rate > 0 && c.Rate > 0 {
			rrows = append(rrows, []string{centAdapter + " / " + centRedis, mode, ratio(a.Rate, c.Rate), ratio(a.P50us, c.P50us), ratio(a.P99us, c.P99us),
				ratio(a.ClientCPUns, c.ClientCPUns), ratio(a.RedisCPUns, c.RedisCPUns)})
			if z, ok := meds[centBoundName]; ok && z.Error == "" && z.Rate > 0 {
				rrows = append(rrows,
					[]string{centBoundName + " / " + centRedis, mode, ratio(z.Rate, c.Rate), ratio(z.P50us, c.P50us), ratio(z.P99us, c.P99us),
						ratio(z.ClientCPUns, c.ClientCPUns), "–"},
					[]string{centAdapter + " / " + centBoundName, mode, ratio(a.Rate, z.Rate), ratio(a.P50us, z.P50us), ratio(a.P99us, z.P99us),
						ratio(a.ClientCPUns, z.ClientCPUns), "–"})
				out.targets = append(out.targets, target{
					fmt.Sprintf("centrifuge (issue 10), %s publish, no numeric target: the ceiling a broker that cost nothing reaches over Centrifuge's RedisBroker, and the adapter's share of that ceiling", mode),
					fmt.Sprintf("ceiling %s (%s vs %s); adapter %.0f%% of it", ratio(z.Rate, c.Rate), fmtRate(z.Rate), fmtRate(c.Rate), 100*a.Rate/z.Rate), "reported"})
				if v.mode == "client" {
					out.targets = append(out.targets, target{
						fmt.Sprintf("centrifuge (issue 44)%s, client publish: the adapter's delivered/s ≥ 80%% of a broker that costs nothing, same node", tag),
						fmt.Sprintf("%.0f%% (%s vs %s)", 100*a.Rate/z.Rate, fmtRate(a.Rate), fmtRate(z.Rate)), status(a.Rate >= 0.8*z.Rate)})
				}
			}
			out.targets = append(out.targets, target{
				fmt.Sprintf("centrifuge (issue 10)%s, %s publish: delivered/s ≥ 1.5× Centrifuge's RedisBroker, %d nodes × %d WebSocket clients, 3 masters", tag, mode, cfg.centNodes, cfg.centClients),
				fmt.Sprintf("%s (%s vs %s)", ratio(a.Rate, c.Rate), fmtRate(a.Rate), fmtRate(c.Rate)), status(a.Rate >= 1.5*c.Rate)})
		}
		if !toy && a.NodeCPUPerPub > 0 && c.NodeCPUPerPub > 0 {
			orows = append(orows, []string{centAdapter + " / " + centRedis, mode, ratio(a.NodeCPUPerPub, c.NodeCPUPerPub),
				ratio(a.ClientsCPUPerPub, c.ClientsCPUPerPub), ratio(a.RuntimeCPUPerPub, c.RuntimeCPUPerPub), ratio(centOwnersTotal(a), centOwnersTotal(c))})
		}
		if !toy && a.Error == "" && a.PubSubConns != nil && connTarget == nil {
			// One subscribe and one publish connection per master per node.
			ok := true
			for _, s := range servers {
				if a.PubSubConns[s] != cfg.centNodes || a.PublishConns[s] != cfg.centNodes {
					ok = false
				}
			}
			connTarget = &target{
				fmt.Sprintf("centrifuge (issue 10): pubsub and publish connections per master = %d nodes × (1 subscribe + 1 publish), not × partitions", cfg.centNodes),
				fmt.Sprintf("pubsub %s, publish %s, other %s (Centrifuge's RedisBroker: pubsub %s, publish %s)", perMaster(a.PubSubConns, servers),
					perMaster(a.PublishConns, servers), perMaster(a.OtherConns, servers), perMaster(c.PubSubConns, servers), perMaster(c.PublishConns, servers)),
				metStr(ok)}
		}
	}
	if connTarget != nil {
		out.targets = append(out.targets, *connTarget)
	}
	var body strings.Builder
	if len(rows) > 0 {
		tbl := table(head, rows)
		show("centrifuge" + tag + "\n" + tbl)
		body.WriteString(tbl)
	}
	if len(rrows) > 0 {
		rt := table([]string{"ratio", "publish", "delivered/s", "p50", "p99", "client CPU/msg", "Redis CPU/msg"}, rrows)
		body.WriteString("\n" + rt)
		show(rt)
	}
	if len(orows) > 0 {
		fmt.Fprintf(&body, "\n**Whose CPU.** The process holds the nodes and the clients on one core, so *client CPU/msg* above is the sum of "+
			"both. Go's profiler, run through each measured window, splits it by owner (profiler labels, which a goroutine's children "+
			"inherit): *node* is the %d Centrifuge nodes with their brokers, HTTP servers and every goroutine those start; *clients* the "+
			"%d centrifuge-go clients with, on the client path, the publishers driving them (on the server path the publishers call "+
			"`Node.Publish`, node work); *runtime* the work no goroutine of either owns (the scheduler, the collector's background "+
			"workers, timers). CPU per publication, medians over the rounds; a sample is 10 ms of CPU, so a round of this length holds a "+
			"few hundred and each figure is good to a few percent. A deployment's node pays its own column and a share of the runtime's, "+
			"not the clients'.\n\n", cfg.centNodes, cfg.centNodes*cfg.centClients)
		ot := table([]string{"broker", "publish", "node CPU/pub", "clients CPU/pub", "runtime CPU/pub", "total"}, orows)
		body.WriteString(ot)
		show("centrifuge, CPU by owner\n" + ot)
	}
	if len(hrows) > 0 {
		if !toy {
			fmt.Fprintf(&body, "\n**History on.** The same nodes, clients and channels; the publishers call `Node.Publish` with "+
				"`PublishOptions{HistorySize: 100, HistoryTTL: 60 * time.Second}` (the server path only: the broker writes history the same way "+
				"whichever path a publication came in by). Both brokers keep each channel's history as a Redis stream in the channel's slot and "+
				"publish in the same Lua script call: `%s` with Centrifuge's own history script (streams, the default), `%s` with its one script "+
				"per publish (offset, stream, epoch, publish). The subscribers do not ask for recovery, so this is the publish cost of history. "+
				"*publishes/s* counts `Node.Publish` calls returned inside the measured window; CPU is per publication (each reaches %d clients).\n\n",
				centRedis, centAdapter, cfg.centFanout)
		} else {
			body.WriteString("\nHistory on, toy heap:\n\n")
		}
		ht := table([]string{"broker", "publishes/s", "delivered/s", "p50", "p99", "p99.9", "client CPU/pub", "Redis CPU/pub", "GC", "live heap", "loss", "runs"}, hrows)
		show("centrifuge, history on" + tag + "\n" + ht)
		body.WriteString(ht)
		if len(hrrows) > 0 {
			rt := table([]string{"ratio, history on", "publishes/s", "delivered/s", "p50", "p99", "client CPU/pub", "Redis CPU/pub"}, hrrows)
			body.WriteString("\n" + rt)
			show(rt)
		}
	}
	out.body = body.String()
	return out, nil
}

// centChannels returns, for each client, the channels it subscribes to:
// channel c goes to clients (c·fanout + r) mod clients for r < fanout.
func centChannels(prefix string, clients int) [][]string {
	out := make([][]string, clients)
	for c := range cfg.centChannels {
		seen := map[int]bool{}
		for r := range cfg.centFanout {
			i := (c*cfg.centFanout + r) % clients
			if !seen[i] {
				seen[i] = true
				out[i] = append(out[i], prefix+strconv.Itoa(c))
			}
		}
	}
	return out
}

// startCentNode starts one Centrifuge node on broker name, serving
// WebSocket on a free loopback port.
func startCentNode(name string, seeds []string, bound *centBound) (*centNode, error) {
	node, err := centrifuge.New(centrifuge.Config{
		LogLevel: centrifuge.LogLevelNone,
		Metrics:  centrifuge.MetricsConfig{RegistererGatherer: prometheus.NewRegistry()},
	})
	if err != nil {
		return nil, err
	}
	node.OnConnecting(func(_ context.Context, e centrifuge.ConnectEvent) (centrifuge.ConnectReply, error) {
		return centrifuge.ConnectReply{Credentials: &centrifuge.Credentials{UserID: string(e.Data)}}, nil
	})
	node.OnConnect(func(c *centrifuge.Client) {
		c.OnSubscribe(func(_ centrifuge.SubscribeEvent, cb centrifuge.SubscribeCallback) {
			cb(centrifuge.SubscribeReply{}, nil)
		})
		c.OnPublish(func(_ centrifuge.PublishEvent, cb centrifuge.PublishCallback) { cb(centrifuge.PublishReply{}, nil) })
	})
	cn := &centNode{node: node}
	switch name {
	case centAdapter:
		cc := &cluster.Config{Addrs: seeds, Partitions: centPartitions}
		cc.Options.Workers = cfg.scWorkers // -sc-workers; 0: the adapter's default
		cc.Options.ReusePayloads = cfg.scReuse
		b, err := centrifugebroker.New(node, centrifugebroker.Config{Cluster: cc})
		if err != nil {
			cn.stop()
			return nil, err
		}
		node.SetBroker(b)
	case centRedis:
		shard, err := centrifuge.NewRedisShard(node, centrifuge.RedisShardConfig{ClusterAddresses: seeds})
		if err != nil {
			cn.stop()
			return nil, fmt.Errorf("centrifuge shard: %w", err)
		}
		b, err := centrifuge.NewRedisBroker(node, centrifuge.RedisBrokerConfig{
			Shards:                      []*centrifuge.RedisShard{shard},
			NumShardedPubSubPartitions:  centPartitions,
			UsePrecomputedPartitionTags: true,
		})
		cn.shard = shard
		if err != nil {
			cn.stop()
			return nil, fmt.Errorf("centrifuge broker: %w", err)
		}
		node.SetBroker(b)
	case centBoundName:
		node.SetBroker(bound.node())
	}
	if err := node.Run(); err != nil {
		cn.stop()
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		cn.stop()
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/connection/websocket", centrifuge.NewWebsocketHandler(node, centrifuge.WebsocketConfig{}))
	cn.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = cn.srv.Serve(ln) }()
	cn.url = "ws://" + ln.Addr().String() + "/connection/websocket"
	return cn, nil
}

// stop closes the node's listener and connections, shuts the node down
// (which closes its broker) and closes the RedisShard, if any.
func (cn *centNode) stop() {
	if cn.srv != nil {
		_ = cn.srv.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = cn.node.Shutdown(ctx)
	if cn.shard != nil {
		cn.shard.Close()
	}
}

// centReadTimeout is the clients' ReadTimeout. centrifuge-go starts a
// goroutine per request that waits ReadTimeout (5 s by default) even once
// the reply came, so at the client path's ~18k publishes/s some 90k of
// them would be parked in the benchmark process. Deployed, those live in
// the clients' own processes; here every collection scans their stacks,
// which bills the node's collector for the load generator, and the
// broker that collects most often (the smaller heap) pays most. One
// second is still 20 times the worst p99.9 latency of these runs.
const centReadTimeout = time.Second

// centSettle is how long a run waits before it starts: Centrifuge keeps a
// shut-down node reachable for about a second (goroutines that
// unsubscribe idle channels), so the previous run's nodes are garbage by
// the time this one starts. The run does not collect first: a collection
// at a fixed point would put the next one of a broker that collects
// rarely (RedisBroker's large heap) at the same point of every run, in
// or out of the measured window; left where it falls, it lands anywhere.
const centSettle = 1200 * time.Millisecond

func centRun(ctx context.Context, name string, v centVariant, seeds, servers []string) (res centResult) {
	time.Sleep(centSettle)
	mode := v.mode
	res.Broker, res.Nodes, res.Clients, res.PublishVia, res.History = name, cfg.centNodes, cfg.centNodes*cfg.centClients, mode, v.history
	res.Channels, res.PayloadBytes, res.Publishers = cfg.centChannels, cfg.payload, cfg.centPublishers
	base := masterConns(servers)

	var nodes []*centNode
	var clients []*gocent.Client
	defer func() {
		var wg sync.WaitGroup
		for _, c := range clients {
			wg.Add(1)
			go func() { defer wg.Done(); c.Close() }()
		}
		wg.Wait()
		for _, nd := range nodes {
			wg.Add(1)
			go func() { defer wg.Done(); nd.stop() }()
		}
		wg.Wait()
		// Wait (at most 5 s) until the masters are back to the connections
		// they had, so the next run's counts start clean.
		deadline := time.Now().Add(5 * time.Second)
		for _, s := range servers {
			for {
				n, _ := clientCounts(s)
				b := base[s]
				if n <= b.pubsub+b.publish+b.other || time.Now().After(deadline) {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
	}()
	bound := &centBound{} // the nodes' shared zero-cost broker, if that is name
	var err error
	underSide(ctx, "node", func() {
		for range cfg.centNodes {
			var nd *centNode
			if nd, err = startCentNode(name, seeds, bound); err != nil {
				return
			}
			nodes = append(nodes, nd)
		}
	})
	if err != nil {
		res.Error = "start node: " + err.Error()
		return res
	}

	var win window
	var hist measure.Histogram
	var total atomic.Uint64
	onPub := func(e gocent.PublicationEvent) {
		total.Add(1)
		sentAt := engines.Stamped(e.Data)
		if win.contains(sentAt.UnixNano()) {
			hist.Record(time.Since(sentAt))
		}
	}
	nClients := cfg.centNodes * cfg.centClients
	prefix := fmt.Sprintf("cent:%s:%d:", name, time.Now().UnixNano()%1e6)
	subs := centChannels(prefix, nClients)
	var allSubs []*gocent.Subscription
	underSide(ctx, "clients", func() {
		for i := range nClients {
			c := gocent.NewProtobufClient(nodes[i%len(nodes)].url, gocent.Config{Data: []byte("user" + strconv.Itoa(i)), ReadTimeout: centReadTimeout})
			clients = append(clients, c)
			if err := c.Connect(); err != nil {
				res.Error = "connect: " + err.Error()
				return
			}
			for _, ch := range subs[i] {
				sub, err := c.NewSubscription(ch)
				if err != nil {
					res.Error = "subscription: " + err.Error()
					return
				}
				sub.OnPublication(onPub)
				if err := sub.Subscribe(); err != nil {
					res.Error = "subscribe: " + err.Error()
					return
				}
				allSubs = append(allSubs, sub)
			}
		}
	})
	if res.Error != "" {
		return res
	}
	res.Subs = len(allSubs)
	deadline := time.Now().Add(60 * time.Second)
	for {
		waiting := 0
		for _, c := range clients {
			if c.State() != gocent.StateConnected {
				waiting++
			}
		}
		for _, s := range allSubs {
			if s.State() != gocent.SubStateSubscribed {
				waiting++
			}
		}
		if waiting == 0 {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			res.Error = fmt.Sprintf("timeout: %d clients or subscriptions not ready", waiting)
			return res
		}
		time.Sleep(20 * time.Millisecond)
	}

	channels := channelNames(prefix, cfg.centChannels)
	publish := func(g int, ch string, buf []byte) error {
		if mode == "client" {
			pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			_, err := clients[g%len(clients)].Publish(pctx, ch, buf)
			return err
		}
		if v.history {
			_, err := nodes[g%len(nodes)].node.Publish(ch, buf, centrifuge.WithHistory(centHistory.HistorySize, centHistory.HistoryTTL))
			return err
		}
		_, err := nodes[g%len(nodes)].node.Publish(ch, buf)
		return err
	}
	side := "node"
	if mode == "client" {
		side = "clients"
	}
	t0, t1 := win.plan(cfg.warmup, cfg.duration)
	var pubs *publishers
	underSide(ctx, side, func() {
		pubs = startPublishers(ctx, &win, cfg.centPublishers, cfg.payload, false, channels, time.Millisecond, publish)
	})
	sleepCtx(ctx, time.Until(t0))
	var split *measure.CPUSplit
	if cfg.cpuprofile == "" {
		if split, err = measure.StartCPUSplit(centSide); err != nil {
			res.Note = "no CPU split: " + err.Error()
		}
	}
	cpu0, rcpu0, rt0 := measure.ProcessCPU(), measure.RedisCPU(servers), measure.ReadRuntime()
	pub0 := pubs.sent()
	sleepCtx(ctx, time.Until(t1))
	pub1 := pubs.sent()
	var owners map[string]time.Duration
	if split != nil {
		if owners, err = split.Stop(); err != nil {
			res.Note = "no CPU split: " + err.Error()
		}
	}
	conns := masterConns(servers)
	pubs.halt()
	// Every message a client receives was delivered to cfg.centFanout of them.
	drain(&total, pubs.sent()*uint64(cfg.centFanout), 5*time.Second)
	cpu1, rcpu1, rt1 := measure.ProcessCPU(), measure.RedisCPU(servers), measure.ReadRuntime()
	res.GCShare = rt0.GCShare(rt1)
	if block := heldHeap(); rt1.LiveHeap > block {
		res.LiveHeap = rt1.LiveHeap - block
	}

	res.PubSubConns, res.PublishConns, res.OtherConns = map[string]int{}, map[string]int{}, map[string]int{}
	for _, s := range servers {
		res.PubSubConns[s] = conns[s].pubsub - base[s].pubsub
		res.PublishConns[s] = conns[s].publish - base[s].publish
		res.OtherConns[s] = conns[s].other - base[s].other
	}
	res.Seconds = t1.Sub(t0).Seconds()
	res.Published = pubs.inWindow() * uint64(cfg.centFanout) // stamped in the window, as Delivered
	res.Delivered = hist.Count()
	res.Rate = float64(res.Delivered) / res.Seconds
	res.P50us = float64(hist.Quantile(0.5)) / 1e3
	res.P99us = float64(hist.Quantile(0.99)) / 1e3
	res.P999us = float64(hist.Quantile(0.999)) / 1e3
	res.cpu, res.redisCPU = cpu1-cpu0, rcpu1-rcpu0
	if res.Delivered > 0 {
		res.ClientCPUns = float64(res.cpu) / float64(res.Delivered)
		res.RedisCPUns = float64(res.redisCPU) / float64(res.Delivered)
	}
	res.PubRate = float64(pub1-pub0) / res.Seconds
	if pub1 > pub0 {
		res.ClientCPUPerPub = float64(res.cpu) / float64(pub1-pub0)
		res.RedisCPUPerPub = float64(res.redisCPU) / float64(pub1-pub0)
		if owners != nil {
			n := float64(pub1 - pub0)
			res.NodeCPUPerPub = float64(owners["node"]) / n
			res.ClientsCPUPerPub = float64(owners["clients"]) / n
			res.RuntimeCPUPerPub = float64(owners[""]) / n
		}
	}
	if v := pubs.firstErr.Load(); v != nil {
		res.Note = "publish errors, first: " + v.(string)
		if res.Delivered == 0 {
			res.Error = res.Note
		}
	}
	return res
}

// centMedian is median over the throughput columns and, per master, the
// median connection counts.
func centMedian(rs []centResult, servers []string) centResult {
	if len(rs) == 0 {
		return centResult{}
	}
	var tps []tpResult
	var ok []centResult
	for _, r := range rs {
		tps = append(tps, r.tpResult)
		if r.Error == "" {
			ok = append(ok, r)
		}
	}
	m := rs[0]
	if len(ok) > 0 {
		m = ok[0]
	}
	m.tpResult = median(tps)
	if len(ok) == 0 {
		return m
	}
	medf := func(get func(centResult) float64) float64 { return medianOf(ok, get) }
	m.PubRate = medf(func(r centResult) float64 { return r.PubRate })
	m.ClientCPUPerPub = medf(func(r centResult) float64 { return r.ClientCPUPerPub })
	m.RedisCPUPerPub = medf(func(r centResult) float64 { return r.RedisCPUPerPub })
	m.NodeCPUPerPub = medf(func(r centResult) float64 { return r.NodeCPUPerPub })
	m.ClientsCPUPerPub = medf(func(r centResult) float64 { return r.ClientsCPUPerPub })
	m.RuntimeCPUPerPub = medf(func(r centResult) float64 { return r.RuntimeCPUPerPub })
	m.GCShare = medf(func(r centResult) float64 { return r.GCShare })
	m.LiveHeap = uint64(medf(func(r centResult) float64 { return float64(r.LiveHeap) }))
	med := func(get func(centResult) int) int {
		v := make([]int, len(ok))
		for i, r := range ok {
			v[i] = get(r)
		}
		sort.Ints(v)
		return v[len(v)/2]
	}
	m.PubSubConns, m.PublishConns, m.OtherConns = map[string]int{}, map[string]int{}, map[string]int{}
	for _, s := range servers {
		m.PubSubConns[s] = med(func(r centResult) int { return r.PubSubConns[s] })
		m.PublishConns[s] = med(func(r centResult) int { return r.PublishConns[s] })
		m.OtherConns[s] = med(func(r centResult) int { return r.OtherConns[s] })
	}
	return m
}

// centLoss is the share of publications' deliveries that no client received.
func centLoss(r centResult) string {
	if r.Published > r.Delivered && r.Published > 0 {
		return fmt.Sprintf("%.2f%%", 100*float64(r.Published-r.Delivered)/float64(r.Published))
	}
	return "0"
}

// centHistoryRow is a row of the history-on table: CPU per publication.
func centHistoryRow(r centResult, runs int) []string {
	if r.Error != "" && r.Delivered == 0 {
		return []string{r.Engine, "error: " + r.Error, "", "", "", "", "", "", "", "", "", strconv.Itoa(runs)}
	}
	us := func(v float64) string { return fmtDur(time.Duration(v * 1e3)) }
	return []string{r.Engine, fmtRate(r.PubRate), fmtRate(r.Rate), us(r.P50us), us(r.P99us), us(r.P999us), fmtDur(time.Duration(r.ClientCPUPerPub)),
		fmtDur(time.Duration(r.RedisCPUPerPub)), gcCell(r), heapCell(r), centLoss(r), strconv.Itoa(runs)}
}

func centRow(r centResult, servers []string, runs int) []string {
	if r.Error != "" && r.Delivered == 0 {
		return []string{r.Engine, r.PublishVia, "error: " + r.Error, "", "", "", "", "", "", "", "", "", "", "", strconv.Itoa(runs)}
	}
	loss := centLoss(r)
	us := func(v float64) string { return fmtDur(time.Duration(v * 1e3)) }
	return []string{r.Engine, r.PublishVia, fmtRate(r.Rate), us(r.P50us), us(r.P99us), us(r.P999us), fmtDur(time.Duration(r.ClientCPUns)),
		fmtDur(time.Duration(r.RedisCPUns)), gcCell(r), heapCell(r), perMaster(r.PubSubConns, servers), perMaster(r.PublishConns, servers), perMaster(r.OtherConns, servers),
		loss, strconv.Itoa(runs)}
}

// centOwnerRow is a row of the CPU-by-owner table: CPU per publication.
func centOwnerRow(r centResult) []string {
	d := func(ns float64) string { return fmtDur(time.Duration(ns)) }
	return []string{r.Engine, r.PublishVia, d(r.NodeCPUPerPub), d(r.ClientsCPUPerPub), d(r.RuntimeCPUPerPub), d(centOwnersTotal(r))}
}

// centOwnersTotal is the profiled CPU per publication, all owners.
func centOwnersTotal(r centResult) float64 {
	return r.NodeCPUPerPub + r.ClientsCPUPerPub + r.RuntimeCPUPerPub
}

// gcCell is the GC column: the collector's share of the Go CPU time.
func gcCell(r centResult) string { return fmt.Sprintf("%.1f%%", 100*r.GCShare) }

// heapCell is the live heap column, in MB, without the -heap block.
func heapCell(r centResult) string { return fmt.Sprintf("%.0f MB", float64(r.LiveHeap)/1e6) }
