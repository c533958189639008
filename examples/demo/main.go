// Command demo runs shardcast end to end on local Redis.
//
// Without flags it starts its own Redis servers from redis-server on PATH:
// a 6-master cluster and 4 standalone instances. It then
//
//  1. prints, from the live cluster's slot map, how the 128 shipped
//     partition tags spread over the masters beside naive {0}..{127} tags;
//  2. runs two cluster brokers (one subscribing, one publishing) and prints
//     per-master partitions, SPUBLISH counts and deliveries;
//  3. runs two sharded brokers over the standalone instances and prints
//     per-instance channel counts and deliveries.
//
// Pass -cluster and/or -shards to use servers of your own instead.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/cluster"
	"github.com/shardcast/shardcast/internal/crc16"
	"github.com/shardcast/shardcast/internal/redistest"
	"github.com/shardcast/shardcast/sharded"
)

func main() {
	var (
		clusterSeeds = flag.String("cluster", "", "comma-separated seed nodes of a Redis Cluster (default: start a local 6-master cluster)")
		shardAddrs   = flag.String("shards", "", "comma-separated standalone Redis addresses (default: start 4 local instances)")
		channels     = flag.Int("channels", 10000, "channels to subscribe")
		rounds       = flag.Int("rounds", 3, "messages published per channel")
		engine       = flag.String("engine", "both", "cluster, sharded or both")
	)
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *engine, split(*clusterSeeds), split(*shardAddrs), *channels, *rounds); err != nil {
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

func run(ctx context.Context, engine string, seeds, shards []string, channels, rounds int) error {
	names := make([]string, channels)
	for i := range names {
		names[i] = fmt.Sprintf("room:%d", i)
	}
	if engine == "cluster" || engine == "both" {
		var c *redistest.Cluster
		if len(seeds) == 0 {
			fmt.Println("starting a local Redis Cluster: 6 masters, no replicas …")
			var stop func()
			var err error
			c, stop, err = redistest.StartSharedCluster(6, 0)
			if err != nil {
				return err
			}
			defer stop()
			seeds = c.Seeds()
		}
		if err := clusterDemo(ctx, seeds, c, names, rounds); err != nil {
			return fmt.Errorf("cluster engine: %w", err)
		}
	}
	if engine == "sharded" || engine == "both" {
		var servers []*redistest.Server
		if len(shards) == 0 {
			fmt.Println("\nstarting 4 local standalone Redis instances …")
			for range 4 {
				s, stop, err := redistest.StartSharedStandalone()
				if err != nil {
					return err
				}
				defer stop()
				servers = append(servers, s)
				shards = append(shards, s.Addr())
			}
		}
		if err := shardedDemo(ctx, shards, servers, names, rounds); err != nil {
			return fmt.Errorf("sharded engine: %w", err)
		}
	}
	return nil
}

// counter counts deliveries and the worst publish→handler lag.
type counter struct {
	n      atomic.Int64
	mu     sync.Mutex
	maxLag time.Duration
}

func (c *counter) handle(m shardcast.Message) {
	c.n.Add(1)
	if !m.PublishedAt.IsZero() {
		lag := time.Since(m.PublishedAt)
		c.mu.Lock()
		c.maxLag = max(c.maxLag, lag)
		c.mu.Unlock()
	}
}

func clusterDemo(ctx context.Context, seeds []string, c *redistest.Cluster, names []string, rounds int) error {
	var got counter
	sub, err := cluster.New(cluster.Config{Addrs: seeds, Options: shardcast.Options{Handler: got.handle}})
	if err != nil {
		return err
	}
	defer sub.Close()
	pub, err := cluster.New(cluster.Config{Addrs: seeds})
	if err != nil {
		return err
	}
	defer pub.Close()

	masters := sub.Masters()
	addrs := make([]string, 0, len(masters))
	for a := range masters {
		addrs = append(addrs, a)
	}
	sort.Strings(addrs)
	layout := sub.Layout()
	naive := make(map[string]int)
	slots, err := masterSlots(ctx, c)
	if err != nil {
		return err
	}
	for p := range layout.Partitions() {
		naive[slots(crc16.Slot(fmt.Sprintf("{%d}", p)))]++
	}
	fmt.Printf("\n%d partitions over %d masters (live slot map):\n", layout.Partitions(), len(addrs))
	fmt.Printf("  %-18s %8s %12s\n", "master", "shipped", "naive {0..}")
	for _, a := range addrs {
		fmt.Printf("  %-18s %8d %12d\n", a, len(masters[a]), naive[a])
	}

	before := spublishCounts(ctx, c)
	start := time.Now()
	if err := sub.Subscribe(ctx, names...); err != nil {
		return err
	}
	fmt.Printf("\nsubscribed %d channels in %v\n", len(names), time.Since(start).Round(time.Millisecond))
	if err := deliverAll(ctx, pub, &got, names, rounds, start); err != nil {
		return err
	}
	if after := spublishCounts(ctx, c); after != nil {
		fmt.Printf("  %-18s %10s\n", "master", "SPUBLISH")
		for _, a := range addrs {
			fmt.Printf("  %-18s %10d\n", a, after[a]-before[a])
		}
	}
	if err := sub.Unsubscribe(ctx, names...); err != nil {
		return err
	}
	return nil
}

// masterSlots returns slot → master address from the live slot map.
func masterSlots(ctx context.Context, c *redistest.Cluster) (func(uint16) string, error) {
	if c == nil {
		return func(uint16) string { return "?" }, nil
	}
	reply, err := c.Nodes()[0].Do(ctx, "CLUSTER", "SLOTS")
	if err != nil {
		return nil, err
	}
	m, err := shardcast.ParseClusterSlotsFrom(reply, c.Nodes()[0].Addr())
	if err != nil {
		return nil, err
	}
	return func(s uint16) string { a, _ := m.MasterOf(s); return a }, nil
}

func spublishCounts(ctx context.Context, c *redistest.Cluster) map[string]int64 {
	if c == nil {
		return nil
	}
	out := make(map[string]int64)
	for _, n := range c.Nodes() {
		if st, err := n.CommandStats(ctx); err == nil {
			out[n.Addr()] = st["spublish"]
		}
	}
	return out
}

func shardedDemo(ctx context.Context, shards []string, servers []*redistest.Server, names []string, rounds int) error {
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
	start := time.Now()
	if err := sub.Subscribe(ctx, names...); err != nil {
		return err
	}
	fmt.Printf("sharded over %d instances (fingerprint %s); subscribed %d channels in %v\n",
		len(shards), sub.Fingerprint(), len(names), time.Since(start).Round(time.Millisecond))
	perShard := make([]int, len(shards))
	for _, n := range names {
		perShard[sub.Shard(n)]++
	}
	fmt.Printf("  %-18s %9s %14s\n", "instance", "channels", "PUBSUB (live)")
	for i, a := range shards {
		live := "-"
		if servers != nil {
			if info, err := servers[i].Info(ctx, "stats"); err == nil {
				live = info["pubsub_channels"]
			}
		}
		fmt.Printf("  %-18s %9d %14s\n", a, perShard[i], live)
	}
	if err := deliverAll(ctx, pub, &got, names, rounds, start); err != nil {
		return err
	}
	return sub.Unsubscribe(ctx, names...)
}

// deliverAll publishes rounds messages to every channel, waits until got
// counted them all, and prints the time since start and the worst lag.
func deliverAll(ctx context.Context, pub shardcast.Broker, got *counter, names []string, rounds int, start time.Time) error {
	if err := publishAll(ctx, pub, names, rounds); err != nil {
		return err
	}
	want := int64(len(names) * rounds)
	if err := waitFor(ctx, func() bool { return got.n.Load() >= want }); err != nil {
		return fmt.Errorf("delivered %d of %d: %w", got.n.Load(), want, err)
	}
	got.mu.Lock()
	worst := got.maxLag
	got.mu.Unlock()
	fmt.Printf("published and delivered %d messages in %v (worst lag %v)\n",
		want, time.Since(start).Round(time.Millisecond), worst.Round(time.Microsecond))
	return nil
}

// publishAll publishes rounds messages to every channel from 32 goroutines,
// so that concurrent publishes share writes on the broker's connections.
func publishAll(ctx context.Context, b shardcast.Broker, names []string, rounds int) error {
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for w := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				for i := w; i < len(names); i += 32 {
					if err := b.Publish(ctx, names[i], []byte(fmt.Sprintf("msg %d", r))); err != nil {
						errs <- err
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

func waitFor(ctx context.Context, ok func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for !ok() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}
