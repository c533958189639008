package sharded

import (
	"context"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/pubconn"
)

// EvalRO runs the read-only script s (EVALSHA_RO) for channel, with keys
// as KEYS and args as ARGV, on the node the broker subscribes channel's
// instance on: with SubscribeOn Replicas a replica of its Sentinel shard,
// which then serves the read instead of the master, from what it has
// replicated so far (it may miss the last writes). On a shard subscribed
// on its master, during an online re-layout, and whenever the replica
// cannot answer (unreachable, loading, cut off from its master), the
// script runs on the master as Eval runs it; so it does on a broker
// without a Handler, which subscribes nowhere. A script that writes fails
// on every node.
func (b *Broker) EvalRO(ctx context.Context, channel string, s *shardcast.Script, keys []string, args ...string) (any, error) {
	return b.publisher.EvalRO(ctx, channel, b.readerOf(channel), s, keys, args)
}

// readerOf returns the connection EvalRO reads channel on when its
// instance is subscribed on a replica, or nil.
func (b *Broker) readerOf(channel string) *pubconn.Pub {
	if b.place == nil {
		return nil
	}
	r := b.route.Load()
	if r == nil || r.next != nil {
		return nil
	}
	cur, _ := r.slots(channel)
	sh := b.slots[cur].Load()
	if sh == nil || sh.sub.Addr == sh.dial.Addr {
		return nil
	}
	return b.readers.For(sh.sub)
}

// pruneReaders closes EvalRO's connections to nodes no slot subscribes
// on any more.
func (b *Broker) pruneReaders() {
	if b.place == nil {
		return
	}
	subs := make(map[string]bool)
	for i := range b.slots {
		if sh := b.slots[i].Load(); sh != nil {
			subs[sh.sub.Addr] = true
		}
	}
	b.readers.Keep(func(addr string) bool { return subs[addr] })
}
