package sharded

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"
	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/engine"
	"github.com/shardcast/shardcast/internal/jump"
)

// route is how the broker maps channels to instances at one moment; it is
// immutable once stored (but for its in-flight count) and replaced whole
// by an online re-layout (docs/RELAYOUT.md). Instances are named by their
// slot, the index in Broker.slots of the instance's connections, so that
// one instance keeps its connections across layouts.
type route struct {
	// cur holds the slot of each instance of the layout in force, in
	// routing order; fp is that layout's fingerprint and addrs its
	// host:port list.
	cur   []int
	fp    string
	addrs []string
	// next is the layout a re-layout moves to (nil when none is under
	// way), nextFP its fingerprint; id and barrier name the re-layout and
	// its barrier channel.
	next        []int
	nextFP      string
	id, barrier string
	// switched is set once moving channels are published under next.
	switched bool
	// inflight counts the publishes of moving channels sent under this
	// route and not yet answered: a re-layout step that replaced the route
	// waits for it to reach zero.
	inflight atomic.Int64
}

// slots returns the slots of channel under cur and, during a re-layout,
// under next (-1 when there is none). The channel moves when they differ.
func (r *route) slots(channel string) (cur, next int) {
	h := xxhash.Sum64String(channel)
	cur = r.cur[jump.Hash(h, len(r.cur))]
	if r.next == nil {
		return cur, -1
	}
	return cur, r.next[jump.Hash(h, len(r.next))]
}

// publishSlot returns the slot a publish of channel goes to, and whether
// the channel moves in the re-layout under way.
func (r *route) publishSlot(channel string) (slot int, moving bool) {
	cur, next := r.slots(channel)
	if next < 0 || next == cur {
		return cur, false
	}
	if r.switched {
		return next, true
	}
	return cur, true
}

// losing returns the indexes in from of the instances that lose channels
// when a layout over from becomes one over to (instances compared by
// host:port): with jump hashing, every instance when the list grows, and
// otherwise those past the end of to or replaced by another at their
// index. The coordinator sends its barriers through these; subscribers
// wait for a barrier on each of their connections to them.
func losing(from, to []string) []int {
	var out []int
	for i := range from {
		if len(to) > len(from) || i >= len(to) || from[i] != to[i] {
			out = append(out, i)
		}
	}
	return out
}

// publishRoute is the sharded engine's engine.PublishRoute: a channel
// goes to the slot of its instance under the route, on that instance's
// publishing connection.
type publishRoute struct{ b *Broker }

func (pr publishRoute) Dest(r *route, channel string) (int, *atomic.Int64) {
	i, moving := r.publishSlot(channel)
	if moving {
		return i, &r.inflight
	}
	return i, nil
}

// ProbeDest returns the slot whose path a probe channel tests, so that
// every slot gets one.
func (pr publishRoute) ProbeDest(channel string) int {
	return router{pr.b}.PathOf(channel) / pr.b.conns
}

func (pr publishRoute) SendTo(ctx context.Context, i int, channel string, payload []byte) error {
	sh := pr.b.slots[i].Load()
	if sh == nil {
		return fmt.Errorf("shardcast: publish %q: no instance in slot %d", channel, i)
	}
	if err := sh.pub.Publish(ctx, channel, payload, pr.b.core.Options.Raw, engine.PublishTime()); err != nil {
		return pr.publishErr(sh.addr, err)
	}
	return nil
}

// publishErr is the error Publish returns for a failed publish to addr.
func (pr publishRoute) publishErr(addr string, err error) error {
	if pr.b.core.Closed() {
		return shardcast.ErrClosed // Close cut the call short
	}
	return fmt.Errorf("shardcast: publish to shard %s: %w", addr, err)
}

func (pr publishRoute) EvalAt(ctx context.Context, i int, _ string, s *shardcast.Script, keys, args []string) (any, error) {
	sh := pr.b.slots[i].Load()
	if sh == nil {
		return nil, fmt.Errorf("shardcast: eval: no instance in slot %d", i)
	}
	v, err := engine.Eval(ctx, sh.pub, s, keys, args)
	if err != nil && pr.b.core.Closed() {
		return nil, shardcast.ErrClosed
	}
	return v, err
}

// QueueTo queues call a's message on slot i's connection.
func (pr publishRoute) QueueTo(ctx context.Context, a *engine.AsyncCall, i int, channel string, payload []byte) error {
	sh := pr.b.slots[i].Load()
	if sh == nil {
		return fmt.Errorf("shardcast: publish %q: no instance in slot %d", channel, i)
	}
	a.SetWhere(sh.addr)
	if err := sh.pub.PublishAsync(ctx, channel, payload, pr.b.core.Options.Raw, engine.PublishTime(), a.Finish()); err != nil {
		return pr.publishErr(sh.addr, err)
	}
	return nil
}

// AsyncFailed is the error Publish returns for a failed publish to addr.
func (pr publishRoute) AsyncFailed(addr string, err error) error { return pr.publishErr(addr, err) }
