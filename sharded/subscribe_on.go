package sharded

import (
	"context"
	"sync"
	"time"

	"github.com/shardcast/shardcast/internal/engine"
)

// avoidFor is how long, with SubscribeOn Replicas, a node whose subscribe
// connection was lost or whose probes stopped coming back is left out of
// placement while its shard has another.
const avoidFor = 10 * time.Second

// placer keeps each Sentinel shard's subscriptions on the node SubscribeOn
// picks for the broker.
type placer struct {
	seq uint64
	// kick wakes every shard's placement loop (a node is in trouble).
	kick chan struct{}

	mu    sync.Mutex
	avoid map[string]time.Time
	// wake holds one channel per placement loop.
	wake []chan struct{}
}

// avoiding reports whether placement leaves addr out now, forgetting the
// nodes avoided long enough.
func (p *placer) avoiding(addr string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	until, ok := p.avoid[addr]
	if ok && !time.Now().Before(until) {
		delete(p.avoid, addr)
		return false
	}
	return ok
}

// troubleAt is the engine's Trouble hook: with SubscribeOn Replicas, a
// node whose subscribe connection was lost or whose probes stopped coming
// back is avoided for avoidFor, and every shard's placement is looked at
// again at once.
func (b *Broker) troubleAt(addr string) {
	p := b.place
	if p == nil {
		return
	}
	p.mu.Lock()
	p.avoid[addr] = time.Now().Add(avoidFor)
	for _, w := range p.wake {
		select {
		case w <- struct{}{}:
		default:
		}
	}
	p.mu.Unlock()
}

// pick returns the node slot i's subscriptions belong on: one of the
// healthy replicas Sentinel lists, picked by the broker's number, or the
// master while none is left. ok is false when the Sentinels could not be
// asked: the subscriptions then stay where they are.
func (b *Broker) pick(ctx context.Context, i int, sh *slot) (addr string, ok bool) {
	replicas, err := sh.master.group.Replicas(ctx)
	if err != nil {
		return "", false
	}
	avoid := func(a string) bool { return a == sh.dial.Addr || b.place.avoiding(a) }
	if addr = engine.Pick(replicas, b.place.seq, uint64(i), avoid); addr == "" {
		addr = sh.dial.Addr
	}
	return addr, true
}

// placeFirst moves, before the links start, the subscriptions of every
// Sentinel shard onto the node pick gives (with SubscribeOn Replicas).
func (b *Broker) placeFirst() {
	if b.place == nil {
		return
	}
	for i := range b.slots {
		sh := b.slots[i].Load()
		if sh == nil || sh.master == nil || sh.links == nil {
			continue
		}
		ctx, cancel := context.WithTimeout(b.core.Ctx(), b.conn.CommandTimeout)
		addr, ok := b.pick(ctx, i, sh)
		cancel()
		if !ok || addr == sh.sub.Addr {
			continue
		}
		// Nothing is subscribed yet: the unstarted links are replaced.
		next := *sh
		next.sub = sh.dial
		next.sub.Addr, next.sub.Master = addr, false
		b.newLinks(i, &next)
		b.slots[i].Store(&next)
		for _, l := range sh.links {
			l.Stop()
		}
	}
}

// keepPlaced runs for slot i, a Sentinel shard, until ctx ends: every
// HealthInterval, and at once when a node is in trouble, it moves the
// shard's subscriptions to the node pick gives when that changed (a
// replica down, promoted, cut off from its master, or back).
func (b *Broker) keepPlaced(ctx context.Context, i int) {
	wake := make(chan struct{}, 1)
	b.place.mu.Lock()
	b.place.wake = append(b.place.wake, wake)
	b.place.mu.Unlock()
	t := time.NewTicker(b.conn.HealthInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-wake:
		}
		sh := b.slots[i].Load()
		if sh == nil || sh.master == nil {
			return
		}
		addr, ok := b.pick(ctx, i, sh)
		if !ok || addr == sh.sub.Addr {
			continue
		}
		b.slotMu.Lock()
		if cur := b.slots[i].Load(); cur != sh {
			b.slotMu.Unlock() // moved meanwhile; look again next time
			continue
		}
		b.reslotLocked(i, sh, "", addr, time.Time{}, false)
	}
}
