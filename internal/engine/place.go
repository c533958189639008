package engine

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"

	"github.com/shardcast/shardcast/internal/pubconn"
)

// Pick returns the node a broker numbered seq subscribes a shard on:
// candidate number (seq + offset) modulo their number, once sorted and rid
// of duplicates and of those avoid names (nil avoids none). Brokers
// numbered in turn spread evenly over each shard, and a broker keeps its
// node while the shard's candidates stay the same; offset (the shard's
// first slot, its index) keeps every broker from taking the first node of
// every shard. It returns "" when no candidate is left.
func Pick(candidates []string, seq, offset uint64, avoid func(addr string) bool) string {
	nodes := slices.Clone(candidates)
	slices.Sort(nodes)
	nodes = slices.Compact(nodes)
	if avoid != nil {
		nodes = slices.DeleteFunc(nodes, avoid)
	}
	if len(nodes) == 0 {
		return ""
	}
	return nodes[(seq+offset)%uint64(len(nodes))]
}

// PlacementSeq numbers the broker for Pick: the next value of the counter
// key, from an INCR on pub bounded by ctx. If that fails (an ACL that
// refuses INCR, the node unreachable, no pub) the broker logs why at Info
// and takes a random number, which spreads a fleet evenly only on
// average.
func PlacementSeq(ctx context.Context, pub *pubconn.Pub, key string, log *slog.Logger) uint64 {
	err := fmt.Errorf("no connection to keep the counter on")
	if pub != nil {
		var v any
		if v, err = pub.Do(ctx, "INCR", key); err == nil {
			if n, isInt := v.(int64); isInt {
				return uint64(n)
			}
			err = fmt.Errorf("INCR answered %v", v)
		}
	}
	log.Info("shardcast: could not number the broker for SubscribeOn; it picks its nodes at random", "key", key, "err", err)
	return rand.Uint64()
}
