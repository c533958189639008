package cluster

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/crc16"
	"github.com/shardcast/shardcast/internal/engine"
	"github.com/shardcast/shardcast/internal/layoutkey"
	"github.com/shardcast/shardcast/internal/pubconn"
)

// SubscribeOn says which node of each shard a broker subscribes on.
// Publishing always goes to masters. Spreading subscriptions over a
// shard's replicas spreads the fan-out: Redis sends each SPUBLISH to every
// node of its shard over the cluster bus, and each node writes it to the
// subscribers it holds.
type SubscribeOn int

const (
	// Masters subscribes on each shard's master (the default).
	Masters SubscribeOn = iota
	// Replicas subscribes on one of each shard's replicas, chosen per
	// broker so that a fleet spreads evenly over them; on the master
	// while the shard has no usable replica.
	Replicas
	// AllNodes subscribes on one node of each shard, master or replica,
	// chosen per broker so that a fleet spreads evenly over them.
	AllNodes
)

// String returns the constant's name.
func (s SubscribeOn) String() string {
	switch s {
	case Masters:
		return "Masters"
	case Replicas:
		return "Replicas"
	case AllNodes:
		return "AllNodes"
	}
	return fmt.Sprintf("SubscribeOn(%d)", int(s))
}

// placement picks, for every partition of assign, the node its
// subscriptions go to: its master with Masters; otherwise one of the
// master's shard (its replicas in slots, and with AllNodes the master
// itself) that avoid does not name, or the master when none is left. The
// pick is the shard's candidates, sorted, at (seq + the shard's first
// slot) modulo their number: brokers numbered in turn (seq) spread evenly
// over each shard, and a broker keeps its node for as long as the shard's
// candidates stay the same. A partition without a master has no node.
func placement(on SubscribeOn, seq uint64, slots shardcast.SlotMap, assign shardcast.Assignment, avoid func(addr string) bool) shardcast.Assignment {
	if on == Masters {
		return assign
	}
	type shard struct {
		first     uint16
		seen      bool
		replicas  []string
		candidate string
	}
	shards := make(map[string]*shard)
	for _, r := range slots.Ranges {
		s := shards[r.Master]
		if s == nil {
			s = &shard{}
			shards[r.Master] = s
		}
		if !s.seen || r.Start < s.first {
			s.first, s.seen = r.Start, true
		}
		s.replicas = append(s.replicas, r.Replicas...)
	}
	for master, s := range shards {
		var nodes []string
		if on == AllNodes {
			nodes = append(nodes, master)
		}
		nodes = append(nodes, s.replicas...)
		if s.candidate = engine.Pick(nodes, seq, uint64(s.first), avoid); s.candidate == "" {
			s.candidate = master
		}
	}
	out := make(shardcast.Assignment, len(assign))
	for p, master := range assign {
		if s := shards[master]; s != nil {
			out[p] = s.candidate
		} else {
			out[p] = master // a master the map does not list: keep it
		}
	}
	return out
}

// sameShard reports whether a and b serve the same slots in m: one is the
// other's master or replica, or both replicate one master.
func sameShard(m shardcast.SlotMap, a, b string) bool {
	for _, r := range m.Ranges {
		in := func(addr string) bool { return addr == r.Master || slices.Contains(r.Replicas, addr) }
		if in(a) && in(b) {
			return true
		}
	}
	return false
}

// troubleAt is the engine's Trouble hook: with SubscribeOn other than
// Masters, a node whose subscribe connection was lost or whose probes
// stopped coming back is avoided for avoidFor, so that the refresh that
// follows moves its partitions to another node of the shard.
func (b *Broker) troubleAt(addr string) {
	if b.cfg.SubscribeOn == Masters {
		return
	}
	b.mu.Lock()
	b.avoid[addr] = time.Now().Add(avoidFor)
	b.mu.Unlock()
}

// avoidingLocked returns whether placement should avoid a node at now,
// forgetting the nodes avoided long enough. The caller holds b.mu.
func (b *Broker) avoidingLocked(now time.Time) func(addr string) bool {
	for addr, until := range b.avoid {
		if !now.Before(until) {
			delete(b.avoid, addr)
		}
	}
	return func(addr string) bool {
		_, ok := b.avoid[addr]
		return ok
	}
}

// placementSeq numbers the broker for placement: the next value of the
// counter layoutkey.Placement names, on the master of its slot in
// slots. If that fails (an ACL that refuses INCR, a master unreachable)
// the broker takes a random number, which spreads a fleet evenly only on
// average.
func (b *Broker) placementSeq(slots shardcast.SlotMap) uint64 {
	key := layoutkey.Placement(b.cfg.Agreement)
	var pub *pubconn.Pub
	if master, ok := slots.MasterOf(crc16.Slot(key)); ok {
		pub = pubconn.New(b.cfg.dialer(master), engine.PubTimeouts(b.cfg.Conn))
		defer pub.Close()
	}
	ctx, cancel := context.WithTimeout(b.core.Ctx(), b.cfg.Conn.CommandTimeout)
	defer cancel()
	return engine.PlacementSeq(ctx, pub, key, b.core.Log)
}
