// Command fleet runs a small fleet of sharded shardcast nodes that publish
// and count numbered messages, so that an online re-layout can be watched
// while messages flow (docs/RELAYOUT.md, "Running it").
//
// Without -shards it starts 3 local Redis instances (redis-server on
// PATH, see examples/localredis), runs the nodes on the first 2 and prints
// the command that moves them to all 3:
//
//	go run ./examples/fleet
//	go run ./cmd/shardcast relayout -shards A,B,C -control A -heartbeat 500ms
//
// With -engine cluster the nodes run on a Redis Cluster instead (-cluster
// seeds, or a local 3-master cluster with a replica each it starts
// itself) with -partitions partitions (default 128), and the command
// printed moves them to 1024:
//
//	go run ./examples/fleet -engine cluster
//	go run ./cmd/shardcast relayout -cluster SEEDS -partitions 1024 -heartbeat 500ms
//
// Every node subscribes every channel and publishes numbered messages to
// them in turn; each prints, every -every, what it published and what it
// received from the whole fleet: lost (numbers skipped and not received
// since), duplicates and reordered. Several processes can form one fleet:
// give each the same -shards and a different -name. With -follow a
// process started on the fleet's original layout after a re-layout adopts
// the layout the fleet recorded instead of failing:
//
//	go run ./examples/fleet -shards A,B -control A -follow -nodes 1 -name late
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/shardcast/shardcast/examples/localredis"
)

func main() {
	var cfg fleetConfig
	flag.StringVar(&cfg.engine, "engine", "sharded", "sharded (standalone instances) or cluster (a Redis Cluster)")
	flag.StringVar(&cfg.shards, "shards", "", "comma-separated Redis instances the nodes start on (default: start 3 local instances and use the first 2)")
	flag.StringVar(&cfg.cluster, "cluster", "", "cluster: comma-separated seed nodes (default: start a local 3-master cluster)")
	flag.IntVar(&cfg.partitions, "partitions", 128, "cluster: the partition count the nodes start with")
	flag.StringVar(&cfg.control, "control", "", "the instance that holds the layout record (default: the first of -shards)")
	flag.IntVar(&cfg.nodes, "nodes", 3, "nodes to run in this process")
	flag.StringVar(&cfg.name, "name", "n", "name prefix of this process's nodes (unique in the fleet)")
	flag.IntVar(&cfg.channels, "channels", 300, "channels every node subscribes and publishes to")
	flag.IntVar(&cfg.rate, "rate", 1000, "messages per second each node publishes")
	flag.DurationVar(&cfg.heartbeat, "heartbeat", 500*time.Millisecond, "Agreement.Heartbeat: paces the re-layout's phases (give relayout the same)")
	flag.DurationVar(&cfg.every, "every", 2*time.Second, "how often each node prints its counts")
	flag.DurationVar(&cfg.duration, "duration", 0, "stop after this long (default: at Ctrl-C)")
	flag.BoolVar(&cfg.check, "check", false, "exit 1 if a node lost, duplicated or reordered a message")
	flag.BoolVar(&cfg.follow, "follow", false, "Agreement.Follow: nodes adopt the layout the running fleet recorded (after a re-layout, say) instead of failing on their own")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if cfg.duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.duration)
		defer cancel()
	}
	if err := run(ctx, cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "fleet:", err)
		os.Exit(1)
	}
}

// fleetConfig holds the command's flags.
type fleetConfig struct {
	engine, shards, control, name string
	cluster                       string
	nodes, channels, rate         int
	partitions                    int
	heartbeat, every              time.Duration
	duration                      time.Duration
	check, follow                 bool
}

// run starts the instances if needed, runs the nodes until ctx ends, and
// prints every node's final counts.
func run(ctx context.Context, cfg fleetConfig, w io.Writer) error {
	out := &lockedWriter{w: w}
	switch cfg.engine {
	case "sharded", "":
	case "cluster":
		return runCluster(ctx, cfg, out)
	default:
		return fmt.Errorf("-engine %q: want sharded or cluster", cfg.engine)
	}
	shards := split(cfg.shards)
	if len(shards) == 0 {
		local, err := localredis.New("fleet")
		if err != nil {
			return err
		}
		defer local.Stop()
		all, err := local.Standalone(ctx, 3)
		if err != nil {
			return err
		}
		shards = all[:2]
		out.printf("fleet: 3 local Redis instances: %s\n", strings.Join(all, " "))
		out.printf("fleet: move the nodes to all 3 with:\n  go run ./cmd/shardcast relayout -shards %s -control %s -heartbeat %v\n",
			strings.Join(all, ","), all[0], cfg.heartbeat)
	}
	if cfg.control == "" {
		cfg.control = shards[0]
	}
	return runNodes(ctx, cfg, shards, out)
}

// runCluster is run for -engine cluster.
func runCluster(ctx context.Context, cfg fleetConfig, out *lockedWriter) error {
	seeds := split(cfg.cluster)
	if len(seeds) == 0 {
		local, err := localredis.New("fleet")
		if err != nil {
			return err
		}
		defer local.Stop()
		if seeds, err = local.Cluster(ctx, 3, 1); err != nil {
			return err
		}
		out.printf("fleet: a local Redis Cluster (3 masters, 1 replica each): %s\n", strings.Join(seeds, " "))
		out.printf("fleet: move the nodes to 1024 partitions with:\n  go run ./cmd/shardcast relayout -cluster %s -partitions 1024 -heartbeat %v\n",
			strings.Join(seeds, ","), cfg.heartbeat)
	}
	cfg.cluster = strings.Join(seeds, ",")
	return runNodes(ctx, cfg, nil, out)
}

// runNodes runs cfg.nodes nodes on shards until ctx ends.
func runNodes(ctx context.Context, cfg fleetConfig, shards []string, out *lockedWriter) error {
	channels := make([]string, cfg.channels)
	for i := range channels {
		channels[i] = fmt.Sprintf("fleet:%d", i)
	}
	var nodes []*node
	defer func() {
		for _, n := range nodes {
			_ = n.b.Close()
		}
	}()
	for i := range cfg.nodes {
		n, err := startNode(nodeConfig{
			Name: fmt.Sprintf("%s%d", cfg.name, i+1), Shards: shards, Control: cfg.control,
			Cluster: split(cfg.cluster), Partitions: cfg.partitions,
			Channels: channels, Rate: cfg.rate, Heartbeat: cfg.heartbeat, Follow: cfg.follow,
		}, out)
		if err != nil {
			return err
		}
		nodes = append(nodes, n)
	}
	on := strings.Join(shards, ",")
	if cfg.cluster != "" {
		on = "the cluster at " + cfg.cluster
	}
	out.printf("fleet: %d nodes on %s, %d channels, %d messages/s each\n", len(nodes), on, len(channels), cfg.rate)
	pubCtx, stopPub := context.WithCancel(context.Background())
	done := make(chan struct{}, len(nodes))
	for _, n := range nodes {
		go func() {
			n.publish(pubCtx)
			done <- struct{}{}
		}()
	}
	tick := time.NewTicker(cfg.every)
	defer tick.Stop()
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-tick.C:
			for _, n := range nodes {
				out.printf("%s\n", n.line())
			}
		}
	}
	stopPub()
	for range nodes {
		<-done
	}
	// Let what is in flight arrive before the final counts.
	time.Sleep(time.Second)
	bad := false
	for _, n := range nodes {
		out.printf("final %s\n", n.line())
		c := n.snapshot()
		bad = bad || c.Lost+c.Duplicates+c.Reordered > 0
	}
	if cfg.check && bad {
		return fmt.Errorf("a node lost, duplicated or reordered messages")
	}
	return nil
}

func split(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}
