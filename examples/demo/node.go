package main

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// node is a plain connection to one Redis server, for looking inside it:
// the counters and slot map the demo prints, and whether a server it
// started is ready. The publishing and subscribing go through shardcast.
type node struct {
	c rueidis.Client
}

// withNode connects to addr, runs f and disconnects.
func withNode(ctx context.Context, addr string, f func(*node) error) error {
	opt := rueidis.ClientOption{
		InitAddress:       []string{addr},
		ForceSingleClient: true, // this node only, even if it is a cluster node
		DisableCache:      true,
		DisableRetry:      true,
	}
	opt.Dialer.Timeout = 2 * time.Second
	c, err := rueidis.NewClient(opt)
	if err != nil {
		return err
	}
	defer c.Close()
	return f(&node{c: c})
}

// info returns one INFO section as field → value.
func (n *node) info(ctx context.Context, section string) (map[string]string, error) {
	text, err := n.c.Do(ctx, n.c.B().Info().Section(section).Build()).ToString()
	if err != nil {
		return nil, err
	}
	return fields(text), nil
}

// fields parses the "field:value" lines of INFO.
func fields(text string) map[string]string {
	// Over RESP3 the reply is a verbatim string, which rueidis hands over
	// with its "txt:" format marker in front.
	text = strings.TrimPrefix(text, "txt:")
	out := make(map[string]string)
	for line := range strings.Lines(text) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			out[k] = v
		}
	}
	return out
}

// calls returns how many times the server ran cmd (lower case), from INFO
// commandstats.
func (n *node) calls(ctx context.Context, cmd string) (int64, error) {
	stats, err := n.info(ctx, "commandstats")
	if err != nil {
		return 0, err
	}
	for part := range strings.SplitSeq(stats["cmdstat_"+cmd], ",") {
		if v, ok := strings.CutPrefix(part, "calls="); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, nil // never called
}

// slotRange is one range of CLUSTER SLOTS: slots First..Last and their
// master.
type slotRange struct {
	First, Last int64
	Master      string
}

// replicaCounts returns how many replicas each master has, by address, from
// CLUSTER NODES: CLUSTER SLOTS leaves a replica out until its replication
// offset has been gossiped, which on a fresh cluster that nothing has
// written to may never happen.
func (n *node) replicaCounts(ctx context.Context) (map[string]int, error) {
	out, err := n.c.Do(ctx, n.c.B().ClusterNodes().Build()).ToString()
	if err != nil {
		return nil, err
	}
	out = strings.TrimPrefix(out, "txt:") // RESP3's verbatim string format
	addrOf := make(map[string]string)     // node id → host:port
	var masterOf []string                 // the master ids of replicas
	for line := range strings.Lines(out) {
		// <id> <ip:port@cport[,hostname]> <flags> <master id or -> …
		f := strings.Fields(line)
		if len(f) < 4 {
			continue
		}
		addr, _, _ := strings.Cut(f[1], "@")
		addrOf[f[0]] = addr
		if slices.Contains(strings.Split(f[2], ","), "slave") {
			masterOf = append(masterOf, f[3])
		}
	}
	counts := make(map[string]int)
	for _, id := range masterOf {
		counts[addrOf[id]]++
	}
	return counts, nil
}

// clusterSlots returns the node's view of which master owns which slots.
func (n *node) clusterSlots(ctx context.Context) ([]slotRange, error) {
	entries, err := n.c.Do(ctx, n.c.B().ClusterSlots().Build()).ToArray()
	if err != nil {
		return nil, err
	}
	out := make([]slotRange, 0, len(entries))
	for _, e := range entries {
		f, err := e.ToArray()
		if err != nil || len(f) < 3 {
			return nil, fmt.Errorf("CLUSTER SLOTS entry %v: %v", e, err)
		}
		first, err1 := f[0].AsInt64()
		last, err2 := f[1].AsInt64()
		master, err3 := f[2].ToArray()
		if err := firstErr(err1, err2, err3); err != nil || len(master) < 2 {
			return nil, fmt.Errorf("CLUSTER SLOTS entry %v: %v", e, err)
		}
		host, err1 := master[0].ToString()
		port, err2 := master[1].AsInt64()
		if err := firstErr(err1, err2); err != nil {
			return nil, fmt.Errorf("CLUSTER SLOTS entry %v: %w", e, err)
		}
		out = append(out, slotRange{First: first, Last: last, Master: net.JoinHostPort(host, strconv.FormatInt(port, 10))})
	}
	return out, nil
}

// keySlots asks the node for the hash slot of every key (CLUSTER KEYSLOT),
// in one round trip.
func (n *node) keySlots(ctx context.Context, keys []string) ([]int64, error) {
	cmds := make(rueidis.Commands, len(keys))
	for i, k := range keys {
		cmds[i] = n.c.B().ClusterKeyslot().Key(k).Build()
	}
	out := make([]int64, len(keys))
	for i, r := range n.c.DoMulti(ctx, cmds...) {
		s, err := r.AsInt64()
		if err != nil {
			return nil, fmt.Errorf("CLUSTER KEYSLOT %s: %w", keys[i], err)
		}
		out[i] = s
	}
	return out, nil
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
