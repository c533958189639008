package sharded

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/agreement"
	"github.com/shardcast/shardcast/internal/engine"
	"github.com/shardcast/shardcast/internal/redisaddr"
	"github.com/shardcast/shardcast/internal/relayout"
)

// steps is what the sharded engine does at each step of an online
// re-layout (relayout.Engine; docs/RELAYOUT.md): it changes the broker's
// route, connects to the instances the new layout adds, subscribes the
// twins of moving channels and the barriers, and drops what the layout
// it left needed.
type steps struct{ b *Broker }

// Prepare makes t's new layout the broker's next one, subscribes every
// moving channel it wants under it too and the barrier on its
// connections to the instances that lose channels, and holds back what
// moving channels bring under the new layout until the barrier of their
// old connection arrived.
func (s steps) Prepare(ctx context.Context, t *agreement.Transition, fromRec shardcast.LayoutRecord) (int, error) {
	b := s.b
	r := b.route.Load()
	from := r.addrs
	if r.fp != t.From {
		from = fromRec.Instances // configured with the new list, started mid-way
	}
	known := maps.Clone(fromRec.Sentinels)
	if known == nil {
		known = make(map[string][]string)
	}
	maps.Copy(known, t.ToRecord.Sentinels)
	cur, err := b.slotsFor(ctx, from, known)
	var next []int
	if err == nil {
		next, err = b.slotsFor(ctx, t.ToRecord.Instances, known)
	}
	if errors.Is(err, shardcast.ErrInvalidConfig) {
		// No retry can mend it: raised in an EventError.
		return 0, fmt.Errorf("%w %s to %s: %w", relayout.ErrCannotFollow, t.ID, t.ToRecord.Description, err)
	}
	if err != nil {
		return 0, err
	}
	if err := b.gate.Lock(ctx, b.core.Closing()); err != nil {
		return 0, err
	}
	defer b.gate.Unlock()
	var need []int
	if b.core.Paths != nil {
		for _, i := range losing(from, t.ToRecord.Instances) {
			for j := range b.conns {
				// A path whose instance is down now waits for no
				// barrier (none could come through it, and dropping a
				// dead instance is a reason to re-layout): its messages
				// are lost with its connection, which is reported.
				if p := cur[i]*b.conns + j; b.pathUp(p) {
					need = append(need, p)
				}
			}
		}
	}
	nr := &route{cur: cur, addrs: from, fp: t.From, next: next, nextFP: t.To, id: t.ID, barrier: t.Barrier}
	if r.id != t.ID || !slices.Equal(r.next, next) {
		b.hand.Reset(need)
		b.route.Store(nr)
	} else {
		nr = r
	}
	if b.core.Paths == nil {
		return 0, nil
	}
	groups := map[int][]string{}
	moving := 0
	for p, path := range b.core.Paths {
		for _, ch := range path.Wanted() {
			if ch == nr.barrier {
				continue
			}
			c, n := nr.slots(ch)
			if c != n && p/b.conns == c {
				q := n*b.conns + p%b.conns
				groups[q] = append(groups[q], ch)
				moving++
			}
		}
	}
	for _, p := range need {
		groups[p] = append(groups[p], nr.barrier)
	}
	if err := b.core.SubscribeGroups(ctx, relayout.ToGroups(groups)); err != nil {
		return 0, fmt.Errorf("subscribing under the new layout: %w", err)
	}
	return moving, nil
}

// Route stores a copy of the route that publishes moving channels under
// the new layout (switched) or the old one, unless the route in force
// does, and returns the in-flight count of the route it replaced.
func (s steps) Route(switched bool) *atomic.Int64 {
	b := s.b
	old := b.route.Load()
	if old.switched == switched {
		return nil
	}
	b.route.Store(&route{cur: old.cur, addrs: old.addrs, fp: old.fp, next: old.next, nextFP: old.nextFP,
		id: old.id, barrier: old.barrier, switched: switched})
	return &old.inflight
}

// Fingerprint returns the fingerprint of the layout in force.
func (s steps) Fingerprint() string { return s.b.Fingerprint() }

// NextFingerprint returns the fingerprint of the layout the re-layout
// under way moves to.
func (s steps) NextFingerprint() string { return s.b.route.Load().nextFP }

// TwinChannels returns the moving channels the broker subscribes under
// the next layout of the route in force.
func (s steps) TwinChannels() []string { return s.b.twinChannels() }

// Finish makes the new layout the one in force, drops the old layout's
// subscriptions of moved channels and the barrier, and frees the slots of
// the instances it no longer uses.
func (s steps) Finish(ctx context.Context, to shardcast.LayoutRecord) error {
	b := s.b
	if err := b.gate.Lock(ctx, b.core.Closing()); err != nil {
		return err
	}
	defer b.gate.Unlock()
	old := b.route.Load()
	b.route.Store(&route{cur: old.next, addrs: to.Instances, fp: old.nextFP})
	b.settle(ctx, old.barrier)
	return nil
}

// Revert returns to the old layout alone after an aborted re-layout
// ended, drops the new layout's subscriptions and the barrier, and frees
// the slots of the instances it no longer uses.
func (s steps) Revert(ctx context.Context) error {
	b := s.b
	if err := b.gate.Lock(ctx, b.core.Closing()); err != nil {
		return err
	}
	defer b.gate.Unlock()
	r := b.route.Load()
	b.route.Store(&route{cur: r.cur, addrs: r.addrs, fp: r.fp})
	b.settle(ctx, r.barrier)
	return nil
}

// twinChannels returns the moving channels the broker subscribes under
// the next layout of the route in force.
func (b *Broker) twinChannels() []string {
	r := b.route.Load()
	if b.core.Paths == nil || r.next == nil {
		return nil
	}
	var out []string
	for p, path := range b.core.Paths {
		for _, ch := range path.Wanted() {
			if ch == r.barrier {
				continue
			}
			if c, n := r.slots(ch); c != n && p/b.conns == n {
				out = append(out, ch)
			}
		}
	}
	slices.Sort(out)
	return out
}

// settle drops every subscription the route in force does not route to
// its path (the old layout's copies of moved channels, the barrier) and
// frees the slots of instances it no longer uses. The caller holds the
// gate.
func (b *Broker) settle(ctx context.Context, barrier string) {
	r := b.route.Load()
	if b.core.Paths != nil {
		rt := router{b}
		groups := map[int][]string{}
		for p, path := range b.core.Paths {
			for _, ch := range path.Wanted() {
				if ch == barrier || rt.PathOf(ch) != p {
					groups[p] = append(groups[p], ch)
				}
			}
		}
		if err := b.core.UnsubscribeGroups(ctx, relayout.ToGroups(groups)); err != nil {
			b.core.Log.Warn("shardcast: re-layout: dropping the old subscriptions failed", "err", err)
		}
	}
	b.slotMu.Lock()
	defer b.slotMu.Unlock()
	for i := range b.slots {
		sh := b.slots[i].Load()
		if sh == nil || slices.Contains(r.cur, i) {
			continue
		}
		busy := false
		if b.core.Paths != nil {
			for j := range b.conns {
				busy = busy || b.core.Paths[i*b.conns+j].WantedCount() > 0
			}
		}
		if busy {
			continue
		}
		b.slots[i].Store(nil)
		sh.master.close()
		for _, l := range sh.links {
			l.Stop()
		}
		sh.pub.Close()
	}
	b.pruneReaders()
}

// slotsFor returns the slot of each address, connecting to the instances
// the broker does not use yet; a Sentinel shard it does not know is
// reached through the Sentinels sentinels gives for it (the layout
// record's and the transition's), and followed from then on.
func (b *Broker) slotsFor(ctx context.Context, addrs []string, sentinels map[string][]string) ([]int, error) {
	b.slotMu.Lock()
	defer b.slotMu.Unlock()
	out := make([]int, len(addrs))
	for k, addr := range addrs {
		out[k] = -1
		free := -1
		for i := range b.slots {
			sh := b.slots[i].Load()
			if sh == nil {
				if free < 0 {
					free = i
				}
				continue
			}
			if sh.addr == addr {
				out[k] = i
				break
			}
		}
		if out[k] >= 0 {
			continue
		}
		if free < 0 {
			return nil, fmt.Errorf("shardcast: re-layout needs more than %d instances at once", len(b.slots))
		}
		sh, err := b.joiningSlot(ctx, addr, sentinels[addr])
		if err != nil {
			return nil, err
		}
		if b.core.Paths != nil {
			b.newLinks(free, sh)
		}
		b.slots[free].Store(sh)
		b.watchMaster(free, sh)
		for _, l := range sh.links {
			l.Start()
		}
		out[k] = free
	}
	return out, nil
}

// joiningSlot connects to addr, an instance a re-layout adds: host:port,
// or a Sentinel shard ("sentinel/name") whose Sentinels are sentinels. It
// is dialled with the credentials and TLS of the broker's own URLs.
func (b *Broker) joiningSlot(ctx context.Context, addr string, sentinels []string) (*slot, error) {
	if strings.HasPrefix(addr, redisaddr.SentinelPrefix) {
		if len(sentinels) == 0 {
			return nil, fmt.Errorf("%w: the re-layout adds the Sentinel master %s without naming its Sentinels (begun by an older version?)", shardcast.ErrInvalidConfig, addr)
		}
		addr = redisaddr.SentinelURL(addr, sentinels, b.conn.TLS != nil, nil)
	}
	t, err := redisaddr.Parse(addr, engine.Login(b.conn))
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, b.conn.DialTimeout)
	defer cancel()
	sh, err := b.newSlot(pctx, t, b.conn)
	if err == nil {
		if err = sh.pub.Ping(pctx); err != nil {
			sh.pub.Close()
			sh.master.close()
		}
	}
	if err != nil {
		return nil, fmt.Errorf("shardcast: re-layout: connect %s: %w", t.ID, err)
	}
	return sh, nil
}

// pathUp reports whether subscribe path p has a live connection.
func (b *Broker) pathUp(p int) bool {
	sh := b.slots[p/b.conns].Load()
	return sh != nil && p%b.conns < len(sh.links) && sh.links[p%b.conns].Current() != nil
}
