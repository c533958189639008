// Command chaos is a soak that accounts for every lost message. It starts
// its own Redis (a 3-master cluster with one replica each, two with
// -subscribe-on replicas or allnodes, or 3 standalone instances),
// publishes numbered messages on many channels through a
// publish-only broker, receives them through a subscribing broker, injects
// faults on a schedule, and at the end checks every message: delivered,
// lost inside a window an event reported, or lost silently; duplicated or
// out of order; and whether every channel still delivers.
//
//	go run ./cmd/chaos -engine both -duration 3m
//
// The "relayout" fault moves both brokers to another layout online
// (cluster: the prefix flips between "" and "x:", so every channel moves;
// sharded: between 3 and 4 instances) and, two times in three, injects
// another fault while it runs.
//
// It exits 1 on any duplicate, reorder, silent loss or dead channel, or
// when the brokers end on different layouts.
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"slices"
	"strings"
	"time"

	"github.com/shardcast/shardcast/cluster"
)

type config struct {
	engine         string
	duration       time.Duration
	faults         string
	seed           uint64
	rate           int
	channels       int
	publishers     int
	gap            time.Duration
	tolerance      time.Duration
	settle         time.Duration
	publishTimeout time.Duration
	down, pause    time.Duration
	verbose        bool
	eventsFile     string
	subscribeOn    cluster.SubscribeOn
	replicas       int
}

var start = time.Now()

func logf(format string, args ...any) {
	now := time.Now()
	fmt.Fprintf(os.Stderr, "%s [%6.1fs] %s\n", now.Format("15:04:05.000"), now.Sub(start).Seconds(), fmt.Sprintf(format, args...))
}

func main() {
	var cfg config
	flag.StringVar(&cfg.engine, "engine", "both", "cluster, sharded, both (those two) or sentinel (sharded over two Sentinel shards)")
	flag.DurationVar(&cfg.duration, "duration", 3*time.Minute, "how long faults are injected, per engine")
	flag.StringVar(&cfg.faults, "faults", "", "comma-separated faults (default: all the engine has); cluster: "+
		strings.Join(clusterFaultNames, ",")+"; sharded: "+strings.Join(shardedFaultNames, ",")+"; sentinel: "+strings.Join(sentinelFaultNames, ","))
	flag.Uint64Var(&cfg.seed, "seed", 0, "random seed for fault order and victims (0: from the clock)")
	flag.IntVar(&cfg.rate, "rate", 8000, "target publishes per second")
	flag.IntVar(&cfg.channels, "channels", 600, "channels published and subscribed")
	flag.IntVar(&cfg.publishers, "publishers", 16, "publishing goroutines (each owns a share of the channels)")
	flag.DurationVar(&cfg.gap, "gap", 4*time.Second, "pause between fault steps, after Redis settled (>3s: a second failover of one shard within ~3s can take 6s)")
	flag.DurationVar(&cfg.tolerance, "tolerance", 50*time.Millisecond, "slack between publish time and an event's window")
	flag.DurationVar(&cfg.settle, "settle", 5*time.Second, "traffic kept flowing after the last fault, before the end check")
	flag.DurationVar(&cfg.publishTimeout, "publish-timeout", 2*time.Second, "bound of each Publish call")
	flag.DurationVar(&cfg.down, "down", time.Second, "sharded kill: how long the instance stays down")
	flag.DurationVar(&cfg.pause, "pause", 4*time.Second, "sharded pause: how long the instance stays frozen (the health timeout is 3s)")
	flag.BoolVar(&cfg.verbose, "v", false, "print every event")
	flag.StringVar(&cfg.eventsFile, "events", "", "write every event to this file (engine name appended)")
	subscribeOn := flag.String("subscribe-on", "masters", "cluster and sentinel: which node of each shard the subscriber subscribes on: masters, replicas or allnodes (sentinel: masters or replicas)")
	flag.IntVar(&cfg.replicas, "replicas", 0, "cluster: replicas per master (default 1 with -subscribe-on masters, else 2)")
	flag.Parse()
	switch *subscribeOn {
	case "masters":
		cfg.subscribeOn = cluster.Masters
	case "replicas":
		cfg.subscribeOn = cluster.Replicas
	case "allnodes":
		cfg.subscribeOn = cluster.AllNodes
	default:
		fmt.Fprintf(os.Stderr, "chaos: -subscribe-on must be masters, replicas or allnodes, not %q\n", *subscribeOn)
		os.Exit(2)
	}
	if cfg.replicas == 0 {
		cfg.replicas = 1
		if cfg.subscribeOn != cluster.Masters {
			cfg.replicas = 2
		}
	}
	if cfg.seed == 0 {
		cfg.seed = uint64(time.Now().UnixNano())
	}
	var engines []string
	switch cfg.engine {
	case "both":
		engines = []string{"cluster", "sharded"}
	case "cluster", "sharded", "sentinel":
		engines = []string{cfg.engine}
	default:
		fmt.Fprintf(os.Stderr, "chaos: -engine must be cluster, sharded, both or sentinel, not %q\n", cfg.engine)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	failed := false
	for _, e := range engines {
		ok, err := runEngine(ctx, e, cfg)
		if err != nil {
			fmt.Fprintf(os.Stderr, "chaos: %s: %v\n", e, err)
			os.Exit(2)
		}
		failed = failed || !ok
	}
	if failed {
		os.Exit(1)
	}
}

var (
	clusterFaultNames  = []string{"clientkill", "kill", "pause", "moveslot", atomicFault, "failover", "failoverforce", "addremove", "restartall", "relayout", "killreplica", "pausereplica"}
	shardedFaultNames  = []string{"clientkill", "kill", "pause", "relayout"}
	sentinelFaultNames = []string{"clientkill", "killmaster", "failover", "pausereplica"}
)

// selectFaults returns the faults of cfg.faults that engine knows, in the
// order given; all of them when the flag is empty.
func selectFaults(engine, list string) ([]string, error) {
	known := clusterFaultNames
	switch engine {
	case "sharded":
		known = shardedFaultNames
	case "sentinel":
		known = sentinelFaultNames
	}
	if list == "" {
		return known, nil
	}
	var out []string
	for _, f := range strings.Split(list, ",") {
		f = strings.TrimSpace(f)
		if slices.Contains(known, f) {
			out = append(out, f)
		} else if !slices.Contains(clusterFaultNames, f) && !slices.Contains(shardedFaultNames, f) && !slices.Contains(sentinelFaultNames, f) {
			return nil, fmt.Errorf("unknown fault %q", f)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("none of -faults %q applies to the %s engine", list, engine)
	}
	return out, nil
}

// runFaults runs the named faults in a shuffled order, round after round,
// until ctx ends; it returns how often each ran and how many failed.
func runFaults(ctx context.Context, names []string, faults map[string]fault, rng *rand.Rand, gap time.Duration) (map[string]int, int) {
	runs := make(map[string]int)
	errs := 0
	for ctx.Err() == nil {
		order := slices.Clone(names)
		rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for _, name := range order {
			if ctx.Err() != nil {
				break
			}
			logf("fault %s", name)
			began := time.Now()
			fctx, cancel := context.WithTimeout(ctx, 90*time.Second)
			err := faults[name](fctx)
			cancel()
			if err != nil && ctx.Err() == nil {
				errs++
				logf("fault %s failed after %v: %v", name, time.Since(began).Round(time.Millisecond), err)
			} else {
				runs[name]++
				logf("fault %s done in %v", name, time.Since(began).Round(time.Millisecond))
			}
			_ = sleepCtx(ctx, gap)
		}
	}
	return runs, errs
}
