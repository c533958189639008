// Command demo runs shardcast end to end on Redis.
//
// Without flags it starts its own servers from redis-server and redis-cli
// on PATH (see examples/localredis): a cluster of 6 masters with one replica each,
// and 4 standalone instances. It then
//
//  1. runs two cluster brokers, one subscribing and one publishing, and
//     prints per master the slots, the partitions the shipped tags put there
//     beside what naive {0}..{127} tags would, the channels subscribed and
//     the SPUBLISH commands it ran;
//  2. runs two sharded brokers over the standalone instances and prints
//     per instance the channels subscribed and the PUBLISH commands it ran.
//
// Pass -cluster and/or -shards to use servers of your own instead. The
// publishing and subscribing use only the public shardcast API; node.go
// reads the servers' counters and slot map to show where things landed.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/cluster"
	"github.com/shardcast/shardcast/examples/localredis"
	"github.com/shardcast/shardcast/sharded"
)

func main() {
	var (
		clusterSeeds = flag.String("cluster", "", "comma-separated seed nodes of a Redis Cluster, host:port without auth or TLS (default: start a local cluster of 6 masters with 1 replica each)")
		shardAddrs   = flag.String("shards", "", "comma-separated standalone Redis addresses, host:port without auth or TLS (default: start 4 local instances)")
		channels     = flag.Int("channels", 10000, "channels to subscribe")
		rounds       = flag.Int("rounds", 3, "messages published per channel")
		engine       = flag.String("engine", "both", "cluster, sharded or both")
	)
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, *engine, split(*clusterSeeds), split(*shardAddrs), *channels, *rounds)
	switch {
	case err != nil && ctx.Err() != nil:
		fmt.Fprintln(os.Stderr, "\ndemo: interrupted (the local servers it started, if any, are stopped)")
		os.Exit(130)
	case err != nil:
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func split(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// partitions is the cluster engine's partition count (its default); every
// node of an application must use the same.
const partitions = 128

func run(ctx context.Context, engine string, seeds, shards []string, channels, rounds int) error {
	if engine != "cluster" && engine != "sharded" && engine != "both" {
		return fmt.Errorf("-engine %q: want cluster, sharded or both", engine)
	}
	names := make([]string, channels)
	for i := range names {
		names[i] = fmt.Sprintf("room:%d", i)
	}
	var local *localredis.Servers
	defer func() {
		if local != nil {
			local.Stop()
		}
	}()
	// startLocal starts servers with start, printing what and how long.
	startLocal := func(what string, start func(*localredis.Servers) ([]string, error)) ([]string, error) {
		if local == nil {
			var err error
			if local, err = localredis.New("demo"); err != nil {
				return nil, err
			}
		}
		fmt.Printf("\nstarting %s …", what)
		t0 := time.Now()
		addrs, err := start(local)
		if err != nil {
			fmt.Println()
			return nil, err
		}
		fmt.Printf(" ready in %v\n", time.Since(t0).Round(10*time.Millisecond))
		return addrs, nil
	}

	if engine == "cluster" || engine == "both" {
		if len(seeds) == 0 {
			var err error
			seeds, err = startLocal("a local Redis Cluster: 6 masters with 1 replica each",
				func(l *localredis.Servers) ([]string, error) { return l.Cluster(ctx, 6, 1) })
			if err != nil {
				return err
			}
		}
		if err := clusterDemo(ctx, seeds, names, rounds); err != nil {
			return fmt.Errorf("cluster engine: %w", err)
		}
	}
	if engine == "sharded" || engine == "both" {
		if len(shards) == 0 {
			var err error
			shards, err = startLocal("4 local standalone Redis instances",
				func(l *localredis.Servers) ([]string, error) { return l.Standalone(ctx, 4) })
			if err != nil {
				return err
			}
		}
		if err := shardedDemo(ctx, shards, names, rounds); err != nil {
			return fmt.Errorf("sharded engine: %w", err)
		}
	}
	return nil
}

func clusterDemo(ctx context.Context, seeds []string, names []string, rounds int) error {
	var got counter
	sub, err := cluster.New(cluster.Config{Addrs: seeds, Partitions: partitions,
		Options: shardcast.Options{Handler: got.handle}})
	if err != nil {
		return err
	}
	defer sub.Close()
	pub, err := cluster.New(cluster.Config{Addrs: seeds, Partitions: partitions})
	if err != nil {
		return err
	}
	defer pub.Close()

	fmt.Printf("\ncluster engine, %d partitions, seed %s\n", partitions, seeds[0])
	masters, err := readMasters(ctx, seeds[0])
	if err != nil {
		return err
	}
	addrs := make([]string, len(masters))
	for i, m := range masters {
		addrs[i] = m.addr
	}
	before, err := callsOn(ctx, addrs, "spublish")
	if err != nil {
		return err
	}
	if err := subscribeAndDeliver(ctx, sub, pub, &got, names, rounds); err != nil {
		return err
	}
	after, err := callsOn(ctx, addrs, "spublish")
	if err != nil {
		return err
	}

	fmt.Printf("  %-16s %-12s %8s %10s %12s %9s %9s\n", "master", "slots", "replicas", "partitions", "naive {0..}", "channels", "SPUBLISH")
	for i, m := range masters {
		live, err := liveChannels(ctx, m.addr, "pubsubshard_channels")
		if err != nil {
			return err
		}
		fmt.Printf("  %-16s %-12s %8d %10d %12d %9s %9d\n", m.addr, m.slots, m.replicas, m.shipped, m.naive, live, after[i]-before[i])
	}
	fmt.Println("  (partitions: where the shipped tags put them; naive: where tags {0}..{127} would)")
	return sub.Unsubscribe(ctx, names...)
}

// master is what the demo prints about one master of the cluster.
type master struct {
	addr     string
	slots    string // e.g. "0-2730"
	replicas int
	shipped  int // partitions whose shipped tag hashes to this master
	naive    int // partitions a tag "{p}" would put here
}

// readMasters reads the live slot map from seed and counts, per master, the
// partitions of the shipped tags and of naive {0}..{127} tags. Redis itself
// hashes the tags (CLUSTER KEYSLOT).
func readMasters(ctx context.Context, seed string) ([]*master, error) {
	layout, err := shardcast.NewLayout(partitions, "")
	if err != nil {
		return nil, err
	}
	shippedKeys := make([]string, partitions)
	naiveKeys := make([]string, partitions)
	for p := range partitions {
		shippedKeys[p] = "{" + layout.Tag(p) + "}"
		naiveKeys[p] = fmt.Sprintf("{%d}", p)
	}
	var ranges []slotRange
	var replicas map[string]int
	var shipped, naive []int64
	err = withNode(ctx, seed, func(n *node) error {
		var err error
		if ranges, err = n.clusterSlots(ctx); err != nil {
			return err
		}
		if replicas, err = n.replicaCounts(ctx); err != nil {
			return err
		}
		if shipped, err = n.keySlots(ctx, shippedKeys); err != nil {
			return err
		}
		naive, err = n.keySlots(ctx, naiveKeys)
		return err
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(ranges, func(a, b slotRange) int { return int(a.First - b.First) })
	var out []*master
	byAddr := make(map[string]*master)
	for _, r := range ranges {
		m := byAddr[r.Master]
		if m == nil {
			m = &master{addr: r.Master, replicas: replicas[r.Master]}
			byAddr[r.Master] = m
			out = append(out, m)
		} else {
			m.slots += ","
		}
		m.slots += fmt.Sprintf("%d-%d", r.First, r.Last)
	}
	ownerOf := func(slot int64) *master {
		for _, r := range ranges {
			if slot >= r.First && slot <= r.Last {
				return byAddr[r.Master]
			}
		}
		return &master{} // an unassigned slot: counted nowhere
	}
	for p := range partitions {
		ownerOf(shipped[p]).shipped++
		ownerOf(naive[p]).naive++
	}
	return out, nil
}

func shardedDemo(ctx context.Context, shards []string, names []string, rounds int) error {
	var got counter
	sub, err := sharded.New(sharded.Config{Addrs: shards, Options: shardcast.Options{Handler: got.handle}})
	if err != nil {
		return err
	}
	defer sub.Close()
	pub, err := sharded.New(sharded.Config{Addrs: shards})
	if err != nil {
		return err
	}
	defer pub.Close()

	fmt.Printf("\nsharded engine over %d instances\n", len(shards))
	before, err := callsOn(ctx, shards, "publish")
	if err != nil {
		return err
	}
	if err := subscribeAndDeliver(ctx, sub, pub, &got, names, rounds); err != nil {
		return err
	}
	after, err := callsOn(ctx, shards, "publish")
	if err != nil {
		return err
	}
	fmt.Printf("  %-16s %9s %9s\n", "instance", "channels", "PUBLISH")
	for i, a := range shards {
		live, err := liveChannels(ctx, a, "pubsub_channels")
		if err != nil {
			return err
		}
		fmt.Printf("  %-16s %9s %9d\n", a, live, after[i]-before[i])
	}
	return sub.Unsubscribe(ctx, names...)
}

// callsOn returns how many times each server ran cmd so far.
func callsOn(ctx context.Context, addrs []string, cmd string) ([]int64, error) {
	out := make([]int64, len(addrs))
	for i, a := range addrs {
		err := withNode(ctx, a, func(n *node) error {
			var err error
			out[i], err = n.calls(ctx, cmd)
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", a, err)
		}
	}
	return out, nil
}

// liveChannels returns a subscription count of INFO stats, such as
// pubsub_channels, as the server reports it.
func liveChannels(ctx context.Context, addr, field string) (string, error) {
	var live string
	err := withNode(ctx, addr, func(n *node) error {
		stats, err := n.info(ctx, "stats")
		live = stats[field]
		return err
	})
	return live, err
}

// counter counts deliveries and the worst publish→handler lag.
type counter struct {
	n      atomic.Int64
	mu     sync.Mutex
	maxLag time.Duration
}

func (c *counter) handle(m shardcast.Message) {
	if !m.PublishedAt.IsZero() {
		lag := time.Since(m.PublishedAt)
		c.mu.Lock()
		c.maxLag = max(c.maxLag, lag)
		c.mu.Unlock()
	}
	c.n.Add(1)
}

// subscribeAndDeliver subscribes sub to names, publishes rounds messages to
// each through pub, waits until got counted them all, and prints how long
// each step took and the worst lag. It needs only the shardcast.Broker
// contract, so it serves both engines.
func subscribeAndDeliver(ctx context.Context, sub, pub shardcast.Broker, got *counter, names []string, rounds int) error {
	start := time.Now()
	if err := sub.Subscribe(ctx, names...); err != nil {
		return err
	}
	fmt.Printf("  subscribed %d channels in %v\n", len(names), time.Since(start).Round(time.Millisecond))
	start = time.Now()
	if err := publishAll(ctx, pub, names, rounds); err != nil {
		return err
	}
	want := int64(len(names) * rounds)
	err := localredis.WaitUntil(ctx, func(context.Context) error {
		if n := got.n.Load(); n < want {
			return fmt.Errorf("delivered %d of %d", n, want)
		}
		return nil
	})
	if err != nil {
		return err
	}
	got.mu.Lock()
	worst := got.maxLag
	got.mu.Unlock()
	fmt.Printf("  published and delivered %d messages in %v (worst lag %v)\n",
		want, time.Since(start).Round(time.Millisecond), worst.Round(time.Microsecond))
	return nil
}

// publishAll publishes rounds messages to every channel from 32 goroutines,
// so that concurrent publishes share writes on the broker's connections.
func publishAll(ctx context.Context, b shardcast.Broker, names []string, rounds int) error {
	const publishers = 32
	var wg sync.WaitGroup
	errs := make(chan error, publishers)
	for w := range publishers {
		wg.Go(func() {
			for r := range rounds {
				for i := w; i < len(names); i += publishers {
					if err := b.Publish(ctx, names[i], fmt.Appendf(nil, "msg %d", r)); err != nil {
						errs <- err
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}
