// Command shardbench is a reproducible sharded Pub/Sub benchmark: it runs
// shardcast's two engines and their peers (Centrifuge's RedisBroker,
// hand-written go-redis, and the redis-benchmark/redis-cli ceiling) against
// the same local Redis, interleaved, and prints tables (or JSON lines).
//
//	shardbench <scenario> [flags]
//
// Scenarios: throughput, latency, resubscribe, connections, broadcast,
// balance, memory, centrifuge, fleet, fanout, presence, map, and all (every
// scenario, then docs/BENCHMARKS.md via -out; with -update, -out replaces
// only the sections of the scenarios run). Without -addrs/-cluster it
// starts its own redis-server processes on free loopback ports and kills
// them (by PID) when it ends.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/shardcast/shardcast/bench/internal/launch"
)

// config holds every flag; each scenario reads the ones it needs.
type config struct {
	addrs, cluster3, cluster6 string
	engines                   string
	channels                  int
	publishers                string
	payload                   int
	duration, warmup          time.Duration
	rounds                    int
	json                      bool
	out                       string
	scWorkers                 int
	scBatch                   int
	scReuse                   bool
	resubChannels             int
	memChannels               int
	memBatch                  int
	rates                     string
	latencyDuration           time.Duration
	brokers                   int
	cpuprofile                string
	memprofile                string
	quick                     bool
	procs                     int
	allCores                  bool
	centNodes                 int
	centClients               int
	centChannels              int
	centFanout                int
	centPublishers            int
	centPublish               string
	centHistory               string
	heap                      int
	reusedBuffer              bool
	centToyHeap               bool
	fleetBrokers              string
	fleetChannels             string
	fleetCentBrokers          int
	fleetCPUProfile           string
	fanoutSubscribers         int
	fanoutChannels            int
	fanoutRate                int
	fanoutPublishers          int
	fanoutPayload             int
	fanoutDuration            time.Duration
	fanoutWarmup              time.Duration
	fanoutRows                string
	fanoutRedis               string
	fanoutCentPartitions      int
	presNodes                 int
	presWorkers               int
	presChannels              int
	presClients               int
	presOps                   string
	presMapping               bool
	mapNodes                  int
	mapWorkers                int
	mapChannels               int
	mapKeys                   int
	mapPayload                int
	mapOps                    string
	update                    bool
}

// clientProcs is the GOMAXPROCS the benchmark process runs with.
var clientProcs int

var cfg config

var scenarios = map[string]func(context.Context, *env) (section, error){
	"throughput":  runThroughput,
	"latency":     runLatency,
	"resubscribe": runResubscribe,
	"connections": runConnections,
	"broadcast":   runBroadcast,
	"balance":     runBalance,
	"memory":      runMemory,
	"centrifuge":  runCentrifuge,
	"fleet":       runFleet,
	"fanout":      runFanout,
	"presence":    runPresence,
	"map":         runMap,
}

// order is the order "all" runs scenarios in (most important first).
var order = []string{"throughput", "resubscribe", "connections", "memory", "balance", "broadcast", "latency", "centrifuge", "fleet", "fanout", "presence", "map"}

func usage() {
	fmt.Fprintf(os.Stderr, "usage: shardbench <%s|all> [flags]\n", strings.Join(order, "|"))
	fs := flags()
	fs.PrintDefaults()
}

func flags() *flag.FlagSet {
	fs := flag.NewFlagSet("shardbench", flag.ContinueOnError)
	fs.StringVar(&cfg.addrs, "addrs", "", "standalone Redis address to use (default: start one)")
	fs.StringVar(&cfg.cluster3, "cluster", "", "seed nodes of a 3-master Redis Cluster to use (default: start one)")
	fs.StringVar(&cfg.cluster6, "cluster6", "", "seed nodes of a 6-master Redis Cluster to use (broadcast, balance; default: start one)")
	fs.StringVar(&cfg.engines, "engines", "", "comma-separated engines (default: all that fit the scenario)")
	fs.IntVar(&cfg.channels, "channels", 1000, "channels (throughput, latency)")
	fs.StringVar(&cfg.publishers, "publishers", "8,128", "publisher goroutines, comma-separated (throughput)")
	fs.IntVar(&cfg.payload, "payload", 256, "payload bytes")
	fs.DurationVar(&cfg.duration, "duration", 5*time.Second, "measured time per throughput run")
	fs.DurationVar(&cfg.warmup, "warmup", 500*time.Millisecond, "unmeasured time before each throughput run")
	fs.IntVar(&cfg.rounds, "rounds", 3, "interleaved rounds (A B C A B C …)")
	fs.BoolVar(&cfg.json, "json", false, "print one JSON object per run on stdout instead of tables")
	fs.StringVar(&cfg.out, "out", "", "write a Markdown report (docs/BENCHMARKS.md) to this file")
	fs.BoolVar(&cfg.update, "update", false, "with -out: replace only the sections of the scenarios run in the existing report (found by their heading; appended if absent), each marked with this run's command and date, and keep the rest")
	fs.IntVar(&cfg.scWorkers, "sc-workers", 0, "shardcast Workers override (0: library default)")
	fs.IntVar(&cfg.scBatch, "sc-batch", 0, "shardcast SubscribeBatch override (0: library default)")
	fs.BoolVar(&cfg.scReuse, "sc-reuse-payloads", false, "shardcast Options.ReusePayloads (every scenario's handler keeps no payload)")
	fs.IntVar(&cfg.resubChannels, "resub-channels", 100000, "channels (resubscribe)")
	fs.IntVar(&cfg.memChannels, "mem-channels", 1000000, "channels (memory)")
	fs.IntVar(&cfg.memBatch, "mem-batch", 10000, "channels per Subscribe call (memory)")
	fs.StringVar(&cfg.rates, "rates", "10000,25000,50000,100000,200000", "publish rates in msgs/s (latency)")
	fs.DurationVar(&cfg.latencyDuration, "latency-duration", 3*time.Second, "time per rate step (latency)")
	fs.IntVar(&cfg.brokers, "brokers", 4, "broker instances (connections)")
	fs.StringVar(&cfg.cpuprofile, "cpuprofile", "", "write a CPU profile of the whole run to this file")
	fs.StringVar(&cfg.memprofile, "memprofile", "", "write an allocation profile of the whole run to this file")
	fs.BoolVar(&cfg.quick, "quick", false, "shorter runs everywhere (smoke test)")
	fs.IntVar(&cfg.procs, "procs", -1, "GOMAXPROCS of the benchmark process (-1: one core fewer than the machine has, leaving one to Redis; 0: Go's default, every core)")
	fs.BoolVar(&cfg.allCores, "all-cores", true, "throughput: also run shardcast, Centrifuge and go-redis on one standalone Redis with the client on every core (GOMAXPROCS = cores)")
	fs.IntVar(&cfg.centNodes, "cent-nodes", 3, "Centrifuge nodes (centrifuge)")
	fs.IntVar(&cfg.centClients, "cent-clients", 20, "WebSocket clients per Centrifuge node (centrifuge)")
	fs.IntVar(&cfg.centChannels, "cent-channels", 120, "channels (centrifuge)")
	fs.IntVar(&cfg.centFanout, "cent-fanout", 3, "subscribed clients per channel, on different nodes when at most -cent-nodes (centrifuge)")
	fs.IntVar(&cfg.centPublishers, "cent-publishers", 64, "closed-loop publisher goroutines (centrifuge)")
	fs.StringVar(&cfg.centPublish, "cent-publish", "server,client", "publish paths, comma-separated: server (Node.Publish), client (centrifuge-go Client.Publish over WebSocket) (centrifuge)")
	fs.IntVar(&cfg.heap, "heap", 256, "MiB of pointer-free memory held live through every run, standing for the rest of a production server's heap (0: none) (throughput, centrifuge)")
	fs.BoolVar(&cfg.reusedBuffer, "reused-buffer", true, "throughput: also run every engine with publishers that reuse one payload buffer each, in a process without the -heap block, as reference rows")
	fs.BoolVar(&cfg.centToyHeap, "cent-toy-heap", true, "also run the server path without the -heap block, as a reference (centrifuge)")
	fs.StringVar(&cfg.centHistory, "cent-history", "off,on", "history, comma-separated: off, on (Node.Publish with HistorySize 100, HistoryTTL 60s; server path only), or both (centrifuge)")
	fs.StringVar(&cfg.fleetBrokers, "fleet-brokers", "50,200", "fleet sizes, comma-separated: broker instances, each with its own connections, one storm per size (fleet)")
	fs.StringVar(&cfg.fleetChannels, "fleet-channels", "10000,2500", "channels per broker: one number for every size, or one per -fleet-brokers entry (fleet)")
	fs.IntVar(&cfg.fleetCentBrokers, "fleet-cent-brokers", 20, "Centrifuge brokers in the fleet: each holds 128 subscribe connections with 1 MiB of rueidis buffers each (about 260 MB a broker) and takes some 3 s of client CPU to recover (fleet)")
	fs.StringVar(&cfg.fleetCPUProfile, "fleet-cpuprofile", "", "write a CPU profile of each storm (the kill until recovery) to this path prefix, one file per engine and size: PREFIX-ENGINE-BROKERS.pprof (fleet; not with -cpuprofile)")
	fs.IntVar(&cfg.fanoutSubscribers, "fanout-subscribers", 30, "subscriber brokers, each subscribed to every channel (fanout)")
	fs.IntVar(&cfg.fanoutChannels, "fanout-channels", 300, "channels (fanout)")
	fs.IntVar(&cfg.fanoutRate, "fanout-rate", 2000, "publishes per second in all, fixed rate; each is delivered to every subscriber (fanout)")
	fs.IntVar(&cfg.fanoutPublishers, "fanout-publishers", 16, "publisher goroutines sharing -fanout-rate, on one publish-only broker (fanout)")
	fs.IntVar(&cfg.fanoutPayload, "fanout-payload", 64, "payload bytes, at least 8 (fanout)")
	fs.DurationVar(&cfg.fanoutDuration, "fanout-duration", 10*time.Second, "measured window per row (fanout)")
	fs.DurationVar(&cfg.fanoutWarmup, "fanout-warmup", 2*time.Second, "publishing before the window, unmeasured (fanout)")
	fs.StringVar(&cfg.fanoutRows, "fanout-rows", "masters,replicas,allnodes,centrifuge-replica", "rows, comma-separated: masters, replicas, allnodes (shardcast SubscribeOn), centrifuge-replica (SubscribeOnReplica), centrifuge (its default, masters) (fanout)")
	fs.StringVar(&cfg.fanoutRedis, "fanout-redis", "", "redis-server binary, or a folder holding redis-server (and redis-cli), for the fanout cluster (default: redis-server in PATH) (fanout)")
	fs.IntVar(&cfg.fanoutCentPartitions, "fanout-cent-partitions", 128, "Centrifuge's NumShardedPubSubPartitions; each is one subscribe connection per broker (fanout)")
	fs.IntVar(&cfg.presNodes, "presence-nodes", 3, "nodes, each with its own presence manager and Redis connections (presence)")
	fs.IntVar(&cfg.presWorkers, "presence-workers", 32, "closed-loop goroutines making presence calls, spread over the nodes (presence)")
	fs.IntVar(&cfg.presChannels, "presence-channels", 1000, "channels (presence)")
	fs.IntVar(&cfg.presClients, "presence-clients", 10, "clients present in each channel: the entries Presence returns (presence)")
	fs.StringVar(&cfg.presOps, "presence-ops", "add,presence,stats", "calls, comma-separated, one kind per run: add (AddPresence), presence (Presence), stats (PresenceStats) (presence)")
	fs.BoolVar(&cfg.presMapping, "presence-user-mapping", true, "user mapping on every channel in both managers, so that PresenceStats counts users in Redis (presence)")
	fs.IntVar(&cfg.mapNodes, "map-nodes", 3, "nodes, each with its own map broker and Redis connections, each subscribed to every map channel (map)")
	fs.IntVar(&cfg.mapWorkers, "map-workers", 32, "closed-loop goroutines making map calls, spread over the nodes (map)")
	fs.IntVar(&cfg.mapChannels, "map-channels", 1000, "map channels (map)")
	fs.IntVar(&cfg.mapKeys, "map-keys", 16, "keys kept in each map channel: the entries ReadState returns (map)")
	fs.IntVar(&cfg.mapPayload, "map-payload", 128, "bytes of each key's value (map)")
	fs.StringVar(&cfg.mapOps, "map-ops", "publish,state", "calls, comma-separated, one kind per run: publish (keyed Publish), state (ReadState of the first page) (map)")
	return fs
}

func main() {
	if len(os.Args) < 2 || strings.HasPrefix(os.Args[1], "-") {
		usage()
		os.Exit(2)
	}
	name := os.Args[1]
	fs := flags()
	if err := fs.Parse(os.Args[2:]); err != nil {
		os.Exit(2)
	}
	var run []string
	switch {
	case name == "all":
		run = order
	case scenarios[name] != nil:
		run = []string{name}
	default:
		usage()
		os.Exit(2)
	}
	clientProcs = cfg.procs
	switch {
	case clientProcs < 0:
		clientProcs = max(1, runtime.NumCPU()-1)
	case clientProcs == 0:
		clientProcs = runtime.NumCPU()
	}
	runtime.GOMAXPROCS(clientProcs)
	if cfg.quick {
		cfg.duration, cfg.warmup, cfg.rounds = time.Second, 200*time.Millisecond, 1
		cfg.resubChannels, cfg.memChannels, cfg.latencyDuration = 10000, 100000, time.Second
		cfg.fleetBrokers, cfg.fleetChannels, cfg.fleetCentBrokers = "10,40", "2000,500", 3
		cfg.fanoutSubscribers, cfg.fanoutDuration, cfg.fanoutWarmup = 10, 2*time.Second, 500*time.Millisecond
	}

	set, err := launch.NewSet()
	if err != nil {
		fmt.Fprintln(os.Stderr, "shardbench:", err)
		os.Exit(1)
	}
	ctx, cancel := context.WithCancel(context.Background())
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sig
		cancel()
		fmt.Fprintln(os.Stderr, "\nshardbench: interrupted; stopping the Redis servers it started")
		set.Close()
		os.Exit(130)
	}()
	code := runAll(ctx, set, name, run)
	cancel()
	set.Close()
	os.Exit(code)
}

func runAll(ctx context.Context, set *launch.Set, name string, run []string) int {
	if cfg.cpuprofile != "" {
		f, err := os.Create(cfg.cpuprofile)
		if err == nil && pprof.StartCPUProfile(f) == nil {
			defer func() { pprof.StopCPUProfile(); _ = f.Close() }()
		}
	}
	if cfg.memprofile != "" {
		defer func() {
			if f, err := os.Create(cfg.memprofile); err == nil {
				_ = pprof.Lookup("allocs").WriteTo(f, 0)
				_ = f.Close()
			}
		}()
	}
	e := newEnv(set, splitList(cfg.addrs), splitList(cfg.cluster3), splitList(cfg.cluster6))
	started := time.Now()
	var sections []section
	failed := 0
	for _, s := range run {
		progress("== scenario %s ==", s)
		sec, err := scenarios[s](ctx, e)
		if err != nil {
			fmt.Fprintf(os.Stderr, "shardbench: %s: %v\n", s, err)
			failed++
			sec = section{Name: s, Title: s, Body: fmt.Sprintf("Scenario failed: `%v`\n", err)}
		}
		sections = append(sections, sec)
		if ctx.Err() != nil {
			break
		}
	}
	if cfg.out != "" {
		write := writeReport
		if cfg.update {
			write = updateReport
		}
		if err := write(cfg.out, name, sections, time.Since(started)); err != nil {
			fmt.Fprintln(os.Stderr, "shardbench:", err)
			return 1
		}
		progress("wrote %s", cfg.out)
	}
	if failed > 0 {
		return 1
	}
	return 0
}

// progress prints a status line on stderr.
func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

// emit prints one run as a JSON line when -json is set.
func emit(v any) {
	if !cfg.json {
		return
	}
	b, err := json.Marshal(v)
	if err == nil {
		fmt.Println(string(b))
	}
}

// show prints a scenario's table unless -json is set.
func show(s string) {
	if !cfg.json {
		fmt.Println(s)
	}
}
