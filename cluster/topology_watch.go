package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/rueidis"
	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/pubconn"
	"github.com/shardcast/shardcast/internal/subconn"
)

// watchTopology polls the slot map, applies changes and heals interrupted
// partitions. It polls every TopologyInterval while all is well, every
// RecoveryInterval while something is interrupted, and at once when asked
// (a connection loss, a server-pushed unsubscribe, a MOVED reply).
func (b *Broker) watchTopology() {
	defer b.wg.Done()
	var polled time.Time
	for {
		interval := b.cfg.TopologyInterval
		if b.degraded() {
			interval = b.cfg.RecoveryInterval
		}
		if !b.awaitPoll(interval, polled) {
			return
		}
		polled = time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), b.cfg.CommandTimeout)
		slots, err := b.pollSlots(ctx)
		if err != nil {
			b.log.Warn("shardcast: topology poll failed", "err", err)
		} else {
			b.applySlots(ctx, slots)
		}
		cancel()
		b.heal()
		b.signalChange()
	}
}

// awaitPoll waits until the next slot-map poll is due: after interval, at
// once when requestRefresh asked, or when kickRoute asked but no sooner
// than RecoveryInterval after the previous poll (at polled). It returns
// false when the broker is closing.
func (b *Broker) awaitPoll(interval time.Duration, polled time.Time) bool {
	timer := time.NewTimer(interval)
	defer timer.Stop()
	select {
	case <-b.closing:
		return false
	case <-b.refresh:
		return true
	case <-timer.C:
		return true
	case <-b.reroute:
	}
	if wait := time.Until(polled.Add(b.cfg.RecoveryInterval)); wait > 0 {
		spacing := time.NewTimer(wait)
		defer spacing.Stop()
		select {
		case <-b.closing:
			return false
		case <-b.refresh:
		case <-spacing.C:
		}
	}
	return true
}

// pollSlots asks the known nodes, one after the other, for CLUSTER SLOTS.
func (b *Broker) pollSlots(ctx context.Context) (shardcast.SlotMap, error) {
	var errs []error
	for addr, node := range b.client.Nodes() {
		m, err := slotsFrom(ctx, addr, node)
		if err == nil {
			return m, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	if len(errs) == 0 {
		return shardcast.SlotMap{}, errors.New("no cluster node known")
	}
	return shardcast.SlotMap{}, errors.Join(errs...)
}

// slotsFrom asks one node for CLUSTER SLOTS.
func slotsFrom(ctx context.Context, addr string, node rueidis.Client) (shardcast.SlotMap, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	reply, err := node.Do(ctx, node.B().ClusterSlots().Build()).ToAny()
	if err != nil {
		return shardcast.SlotMap{}, fmt.Errorf("%s: %w", addr, err)
	}
	m, err := shardcast.ParseClusterSlotsFrom(reply, addr)
	if err == nil && len(m.Ranges) == 0 {
		err = errors.New("empty slot map")
	}
	if err != nil {
		return shardcast.SlotMap{}, fmt.Errorf("%s: %w", addr, err)
	}
	return m, nil
}

// confirmMoves keeps a partition on its current master when the master
// the polled map moves it to does not claim the slot itself. The node that
// answered the poll may not have heard of a slot move yet (resharding tells
// the new owner first, the rest later), and following its stale map would
// move subscriptions away and back again. A destination that cannot be
// asked is trusted.
func (b *Broker) confirmMoves(ctx context.Context, next shardcast.Assignment) shardcast.Assignment {
	b.mu.Lock()
	old := b.assign
	b.mu.Unlock()
	if old == nil || len(old) != len(next) {
		return next
	}
	views := make(map[string]*shardcast.SlotMap)
	for p := range next {
		dest := next[p]
		if dest == "" || dest == old[p] {
			continue
		}
		view, asked := views[dest]
		if !asked {
			if node, ok := b.client.Nodes()[dest]; ok {
				if m, err := slotsFrom(ctx, dest, node); err == nil {
					view = &m
				}
			}
			views[dest] = view
		}
		if view == nil {
			continue
		}
		if owner, _ := view.MasterOf(b.layout.Slot(p)); owner != dest {
			next[p] = old[p]
		}
	}
	return next
}

// applySlots installs a new slot map: it recomputes the partition →
// master assignment, interrupts the partitions that moved so that heal
// resubscribes them on their new owner, opens connections to new masters
// and closes those to departed ones.
//
// Order on a move: the new owner is subscribed only after it owns the
// slot (earlier it would answer MOVED), and the old owner has by then
// dropped the subscriptions itself with a pushed sunsubscribe (or is gone),
// so the broker never sends an explicit unsubscribe to the old owner. Since
// a SPUBLISH runs on exactly one master and the broker subscribes only on
// masters, no message can reach one broker twice; the price is a short gap,
// reported as Interrupted/Restored.
//
// Moved partitions are interrupted before any connection is opened or
// closed: a new master's connection resubscribes its partitions as soon as
// it is up, and interrupting them after that would report a loss that did
// not happen and subscribe them a second time.
func (b *Broker) applySlots(ctx context.Context, slots shardcast.SlotMap) {
	assign := b.confirmMoves(ctx, shardcast.Assign(b.layout.Slot, b.layout.Partitions(), slots))
	b.mu.Lock()
	if b.stopping {
		b.mu.Unlock()
		return
	}
	old := b.assign
	b.slots, b.assign = slots, assign
	stale := b.routeLocked(assign)
	var started, stopped []*masterConn
	// keep maps a master to its live wire: a moved partition already
	// active there was resubscribed by a Subscribe racing this update.
	keep := make(map[string][]*subconn.Conn)
	// healthy maps each master to when its wires last proved healthy: a
	// partition that moved away stopped delivering at some point after.
	healthy := make(map[string]time.Time)
	if b.parts != nil {
		wantMasters := make(map[string]bool)
		for _, addr := range assign {
			if addr != "" {
				wantMasters[addr] = true
			}
		}
		for addr, conns := range b.masters {
			for _, m := range conns {
				if t := m.lastHealthy(); t.UnixNano() > 0 && (healthy[addr].IsZero() || t.Before(healthy[addr])) {
					healthy[addr] = t
				}
				keep[addr] = append(keep[addr], m.current())
			}
			if !wantMasters[addr] {
				delete(b.masters, addr)
				delete(keep, addr)
				stopped = append(stopped, conns...)
			}
		}
		for addr := range wantMasters {
			if _, ok := b.masters[addr]; !ok {
				conns := make([]*masterConn, b.cfg.ConnsPerMaster)
				for i := range conns {
					conns[i] = newMasterConn(b, addr, i)
				}
				b.masters[addr] = conns
				started = append(started, conns...)
			}
		}
	}
	b.mu.Unlock()

	if old != nil {
		b.reportMoves(old, assign, keep, healthy)
	}
	for _, m := range started {
		go m.run()
	}
	for _, m := range stopped {
		m.close()
	}
	for _, p := range stale {
		b.retire(p)
	}
}

// routeLocked points every partition at the publishing connection of its
// master, opening connections (lazily: pubconn dials on first use) for
// new masters, and returns those of masters that own nothing any more.
// The caller holds b.mu.
func (b *Broker) routeLocked(assign shardcast.Assignment) (stale []*pubconn.Pub) {
	route := make([]*pubconn.Pub, len(assign))
	owners := make(map[string]bool)
	for p, addr := range assign {
		if addr == "" {
			continue
		}
		pub := b.pubs[addr]
		if pub == nil {
			pub = pubconn.New(subconn.FromOption(addr, b.cfg.clientOption()), b.cfg.HealthTimeout, b.cfg.ReconnectMin)
			b.pubs[addr] = pub
		}
		route[p] = pub
		owners[addr] = true
	}
	for addr, pub := range b.pubs {
		if !owners[addr] {
			delete(b.pubs, addr)
			stale = append(stale, pub)
		}
	}
	b.route.Store(&route)
	return stale
}

// retire closes the publishing connection of a master that owns nothing
// any more, after HealthTimeout: publishes already sent on it get their
// replies (a MOVED sends them on through rueidis) instead of an error.
func (b *Broker) retire(p *pubconn.Pub) {
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		t := time.NewTimer(b.cfg.HealthTimeout)
		defer t.Stop()
		select {
		case <-t.C:
		case <-b.closing:
		}
		p.Close()
	}()
}

// watchPublishRoute keeps a broker without a Handler (it only publishes)
// routing to the right masters: it polls the slot map when a publish met
// a stale route (see Publish) and every TopologyInterval.
func (b *Broker) watchPublishRoute() {
	defer b.wg.Done()
	var polled time.Time
	for {
		if !b.awaitPoll(b.cfg.TopologyInterval, polled) {
			return
		}
		polled = time.Now()
		ctx, cancel := context.WithTimeout(b.ctx, b.cfg.CommandTimeout)
		slots, err := b.pollSlots(ctx)
		if err != nil {
			if b.ctx.Err() == nil { // not Close cutting the poll short
				b.log.Warn("shardcast: topology poll failed", "err", err)
			}
		} else {
			b.applySlots(ctx, slots)
		}
		cancel()
	}
}

// reportMoves reports the assignment change and interrupts the moved
// partitions that are not already active on their new owner's wire (keep).
// The loss of a moved partition dates from when its old master was last
// known healthy.
func (b *Broker) reportMoves(old, assign shardcast.Assignment, keep map[string][]*subconn.Conn, healthy map[string]time.Time) {
	diff := shardcast.DiffAssignments(old, assign)
	if diff.Empty() {
		return
	}
	b.topologyChanges.Add(1)
	now := time.Now()
	ev := shardcast.Event{Kind: shardcast.EventTopologyChanged, Since: now}
	for _, mv := range diff.Moved {
		ev.Partitions = append(ev.Partitions, mv.Partition)
	}
	b.log.Info("shardcast: topology changed", "moved_partitions", len(diff.Moved),
		"added_masters", diff.AddedMasters, "removed_masters", diff.RemovedMasters)
	b.emitter.Emit(ev)
	if b.parts == nil {
		return
	}
	// One Interrupted event per old → new master pair. The moved partitions
	// stay locked (ascending, the only place that holds several) until the
	// events are queued, so that a Subscribe re-activating one of them
	// cannot report it Restored before it is reported Interrupted.
	for _, mv := range diff.Moved {
		b.parts[mv.Partition].mu.Lock()
	}
	defer func() {
		for _, mv := range diff.Moved {
			b.parts[mv.Partition].mu.Unlock()
		}
	}()
	type route struct{ from, to string }
	lost := make(map[route]*shardcast.Event)
	var order []route
	for _, mv := range diff.Moved {
		p := b.parts[mv.Partition]
		since := now
		if t, ok := healthy[mv.From]; ok && t.Before(since) {
			since = t
		}
		var keepWire *subconn.Conn
		if wires := keep[mv.To]; len(wires) > 0 {
			keepWire = wires[p.id%len(wires)]
		}
		chans, ok := p.interruptUnlessLocked(keepWire, since)
		if !ok {
			continue
		}
		r := route{mv.From, mv.To}
		e := lost[r]
		if e == nil {
			e = &shardcast.Event{Kind: shardcast.EventInterrupted, Shard: mv.From, Since: since,
				Err: fmt.Errorf("%w: from %s to %s", shardcast.ErrPartitionMoved, mv.From, mv.To)}
			lost[r] = e
			order = append(order, r)
		}
		e.Partitions = append(e.Partitions, p.id)
		e.Channels = append(e.Channels, chans...)
	}
	for _, r := range order {
		b.emitter.Emit(*lost[r])
	}
}

// heal resubscribes every interrupted partition whose master connection is
// up.
func (b *Broker) heal() {
	if b.parts == nil {
		return
	}
	b.mu.Lock()
	type job struct {
		m   *masterConn
		ids []int
	}
	jobs := make(map[*masterConn]*job)
	for id := range b.assign {
		m := b.connForLocked(id)
		if m == nil {
			continue
		}
		j := jobs[m]
		if j == nil {
			j = &job{m: m}
			jobs[m] = j
		}
		j.ids = append(j.ids, id)
	}
	b.mu.Unlock()
	// Each master heals on its own goroutine: one slow or frozen master
	// must not hold up the others, nor the next topology poll.
	for _, j := range jobs {
		wire := j.m.current()
		if wire == nil {
			continue
		}
		var stale []int
		for _, id := range j.ids {
			if b.parts[id].activeWire() != wire {
				stale = append(stale, id)
			}
		}
		if len(stale) == 0 || !j.m.syncing.CompareAndSwap(false, true) {
			continue
		}
		b.wg.Add(1)
		go func(m *masterConn) {
			defer b.wg.Done()
			defer m.syncing.Store(false)
			b.sync(m, wire, stale)
		}(j.m)
	}
}

// degraded reports whether some wanted partition is interrupted, or some
// master connection is down or slow to answer its health ping.
func (b *Broker) degraded() bool {
	for _, m := range b.allConns() {
		if m.current() == nil || m.slow.Load() {
			return true
		}
	}
	for _, p := range b.parts {
		if p.wantedCount() > 0 && p.activeWire() == nil {
			return true
		}
	}
	return false
}
