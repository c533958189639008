package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/cluster"
	"github.com/shardcast/shardcast/sharded"
)

// nodeConfig is what one fleet node needs.
type nodeConfig struct {
	Name       string
	Shards     []string // the instance list it starts with (sharded)
	Control    string   // the instance that holds the layout record (sharded)
	Cluster    []string // seed nodes: a cluster node instead of a sharded one
	Partitions int      // the partition count a cluster node starts with
	Channels   []string
	Rate       int // messages per second it publishes, over all channels
	Heartbeat  time.Duration
	Follow     bool      // Agreement.Follow: adopt the fleet's recorded layout
	Out        io.Writer // where it reports re-layout phases and faults
}

// node is one member of the fleet: a broker (sharded, or on a Redis
// Cluster) that subscribes every channel and publishes numbered messages
// to them in turn, and counts, per channel and publisher, what it
// receives.
type node struct {
	cfg nodeConfig
	b   shardcast.Broker
	// where says what layout the broker runs on, for its report line.
	where func() string
	out   *lockedWriter

	published atomic.Int64
	failed    atomic.Int64

	mu     sync.Mutex
	counts counts
	last   map[string]int          // channel|publisher → highest number received
	gaps   map[string]map[int]bool // numbers skipped, not received yet
}

// counts are what a node saw of the fleet's messages. Lost counts the
// numbers skipped in a channel's sequence from a publisher and not
// received since (one that arrives later counts as reordered instead).
type counts struct {
	Received, Lost, Duplicates, Reordered int
}

func startNode(cfg nodeConfig, out *lockedWriter) (*node, error) {
	n := &node{cfg: cfg, out: out, last: map[string]int{}, gaps: map[string]map[int]bool{}}
	agreement := shardcast.Agreement{Heartbeat: cfg.Heartbeat, Follow: cfg.Follow}
	opts := shardcast.Options{Handler: n.handle, OnEvent: n.event, QueueSize: 1 << 16}
	if len(cfg.Cluster) > 0 {
		b, err := cluster.New(cluster.Config{Addrs: cfg.Cluster, Partitions: cfg.Partitions, Agreement: agreement, Options: opts})
		if err != nil {
			return nil, err
		}
		n.b = b
		n.where = func() string {
			l := b.Layout()
			return fmt.Sprintf("on %d partitions, prefix %q (%s)", l.Partitions(), l.Prefix(), b.Fingerprint())
		}
	} else {
		b, err := sharded.New(sharded.Config{Addrs: cfg.Shards, ControlAddr: cfg.Control, Agreement: agreement, Options: opts})
		if err != nil {
			return nil, err
		}
		n.b = b
		n.where = func() string { return fmt.Sprintf("on %d instances (%s)", len(b.Instances()), b.Fingerprint()) }
	}
	b := n.b
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.Subscribe(ctx, cfg.Channels...); err != nil {
		_ = b.Close()
		return nil, err
	}
	return n, nil
}

// handle counts one message "<publisher>:<number>".
func (n *node) handle(m shardcast.Message) {
	pub, num, ok := strings.Cut(string(m.Payload), ":")
	if !ok {
		return
	}
	seq, err := strconv.Atoi(num)
	if err != nil {
		return
	}
	k := m.Channel + "|" + pub
	n.mu.Lock()
	defer n.mu.Unlock()
	n.counts.Received++
	last, seen := n.last[k]
	switch {
	case !seen || seq == last+1:
	case seq > last+1:
		g := n.gaps[k]
		if g == nil {
			g = map[int]bool{}
			n.gaps[k] = g
		}
		for s := last + 1; s < seq; s++ {
			g[s] = true
		}
		n.counts.Lost += seq - last - 1
	case n.gaps[k][seq]:
		delete(n.gaps[k], seq)
		n.counts.Lost--
		n.counts.Reordered++
		return
	default:
		n.counts.Duplicates++
		return
	}
	n.last[k] = seq
}

// event reports the re-layout's phases and any interruption.
func (n *node) event(ev shardcast.Event) {
	switch ev.Kind {
	case shardcast.EventRelayout:
		n.out.printf("%s: re-layout %s (%d moving channels)%s\n", n.cfg.Name, ev.Phase, ev.Count, errSuffix(ev.Err))
	case shardcast.EventInterrupted, shardcast.EventRestored, shardcast.EventDropped, shardcast.EventError:
		n.out.printf("%s: %v %s %d channels%s\n", n.cfg.Name, ev.Kind, ev.Shard, len(ev.Channels), errSuffix(ev.Err))
	}
}

func errSuffix(err error) string {
	if err == nil {
		return ""
	}
	return ": " + err.Error()
}

// publish sends numbered messages to every channel in turn at cfg.Rate
// until ctx ends.
func (n *node) publish(ctx context.Context) {
	seq := make([]int, len(n.cfg.Channels))
	const tick = 10 * time.Millisecond
	per := max(1, n.cfg.Rate*int(tick)/int(time.Second))
	t := time.NewTicker(tick)
	defer t.Stop()
	i := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for range per {
			seq[i]++
			// Not cut short by ctx: a publish Redis took is counted.
			pctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := n.b.Publish(pctx, n.cfg.Channels[i], []byte(n.cfg.Name+":"+strconv.Itoa(seq[i])))
			cancel()
			if err != nil {
				n.failed.Add(1)
				if errors.Is(err, shardcast.ErrNotSent) {
					seq[i]-- // Redis did not take it: reuse the number
				}
			} else {
				n.published.Add(1)
			}
			i = (i + 1) % len(seq)
		}
	}
}

func (n *node) snapshot() counts {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.counts
}

// line is the node's report: its own publishes, what it received from
// the fleet, and the layout it runs on.
func (n *node) line() string {
	c := n.snapshot()
	return fmt.Sprintf("%-4s published %7d  received %8d  lost %d  duplicates %d  reordered %d  failed publishes %d  %s",
		n.cfg.Name, n.published.Load(), c.Received, c.Lost, c.Duplicates, c.Reordered, n.failed.Load(), n.where())
}

// lockedWriter serialises the nodes' output lines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) printf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.w, format, args...)
}
