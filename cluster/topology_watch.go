package cluster

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/engine"
	"github.com/shardcast/shardcast/internal/pubconn"
	"github.com/shardcast/shardcast/internal/subconn"
)

// poll is one topology pass of the maintenance loop: it reads the slot
// map and applies it. Interrupted partitions are healed after it.
func (b *Broker) poll(ctx context.Context) {
	asked := time.Now()
	slots, from, err := b.pollSlots(ctx)
	if err != nil {
		if b.core.Ctx().Err() == nil { // not Close cutting the poll short
			b.core.Log.Warn("shardcast: topology poll failed", "err", err)
		}
		return
	}
	b.applySlots(ctx, slots)
	b.confirmReconnected(slots, from, asked)
	if from == "" || !b.waitsForConfirmation(from) {
		return
	}
	// Every node the poll could ask had reconnected (the broker's
	// connections dropped together): from confirmed the others, and is
	// asked about by one of them now, not a RecoveryInterval later.
	asked = time.Now()
	if slots, again, err := b.pollSlots(ctx); err == nil && again != from {
		b.applySlots(ctx, slots)
		b.confirmReconnected(slots, again, asked)
	}
}

// waitsForConfirmation reports whether a subscribe link to addr
// reconnected and waits for a slot map from another node (see
// confirmReconnected).
func (b *Broker) waitsForConfirmation(addr string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.ContainsFunc(b.nodes[addr], (*engine.Link).Unconfirmed)
}

// confirmReconnected lets the links that reconnected to a node no later
// than asked subscribe again (see engine.Link.Confirm), when slots, read
// from node from at asked or later, lists their node (as a master, or as
// a replica placement may subscribe on) and from is another node. A
// master killed and restarted claims its old slots, in its own slot map
// too, until the cluster bus tells it that its replica took over; the
// other nodes knew already. A from of "" (no other node could be asked: a
// cluster of one master and no replica) confirms every node slots lists.
// (applySlots has stopped the links of the nodes placement no longer
// chose.)
func (b *Broker) confirmReconnected(slots shardcast.SlotMap, from string, asked time.Time) {
	listed := make(map[string]bool)
	for _, r := range slots.Ranges {
		listed[r.Master] = true
		for _, replica := range r.Replicas {
			listed[replica] = true
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for addr, links := range b.nodes {
		if addr == from || !listed[addr] {
			continue
		}
		for _, l := range links {
			l.Confirm(asked)
		}
	}
}

// pollSlots asks for CLUSTER SLOTS until a node answers, and returns the
// map with the address of the node that answered ("" when it was the only
// node to ask): the masters the
// broker publishes to, on their publishing connections, then the
// replicas of the slot map it holds, the seeds and the replicas it
// remembers from earlier maps (see shardMemory), each on a connection
// of its own, closed after the question (when the masters are all gone,
// or at startup, when none is known yet). See firstSlots for how the
// nodes share ctx's time.
func (b *Broker) pollSlots(ctx context.Context) (shardcast.SlotMap, string, error) {
	b.mu.Lock()
	var sources, last []slotSource
	for addr, pub := range b.pubs {
		src := slotSource{addr: addr, pub: pub}
		if slices.ContainsFunc(b.nodes[addr], (*engine.Link).Unconfirmed) {
			// A master that came back may be one restarted with a stale
			// slot table: asked last, so that its own word does not
			// stand in for the cluster's (see confirmReconnected).
			last = append(last, src)
			continue
		}
		sources = append(sources, src)
	}
	var others []string
	for _, r := range b.slots.Ranges {
		others = append(others, r.Replicas...)
	}
	// The seeds before the replicas the memory keeps: those may be long
	// gone (a node replaced on a new address), and each costs the poll a
	// stagger, so that enough of them would use up its time first.
	others = append(others, b.cfg.seeds...)
	for replica := range b.shards {
		others = append(others, replica) // one the last map left out, too
	}
	b.mu.Unlock()

	for _, addr := range others {
		known := func(s slotSource) bool { return s.addr == addr }
		if !slices.ContainsFunc(sources, known) && !slices.ContainsFunc(last, known) {
			sources = append(sources, slotSource{addr: addr})
		}
	}
	alone := len(sources) == 0 && len(last) <= 1
	sources = append(sources, last...)
	if len(sources) == 0 {
		return shardcast.SlotMap{}, "", errors.New("no cluster node known")
	}
	m, from, err := b.firstSlots(ctx, sources)
	if alone {
		from = "" // no other node to contradict it: a cluster of one
	}
	return m, from, err
}

// pollStagger is how long firstSlots waits for a node before it asks the
// next one too (at most SlotsTimeout).
const pollStagger = 200 * time.Millisecond

// slotSource is a node to ask for the slot map: on the broker's
// publishing connection pub, or, when pub is nil, on one of its own.
type slotSource struct {
	addr string
	pub  *pubconn.Pub
}

// firstSlots asks the sources for CLUSTER SLOTS in order and returns the
// first answer. A node that fails is followed at once by the next one; a
// node that is slow to answer (a host gone from the network, where only
// DialTimeout ends the dial, or a frozen master) is left to go on while
// the next one is asked after pollStagger. Asking one after the other
// would let a few such nodes use up ctx before a live one was reached: a
// remembered replica whose host is gone would keep every poll from the
// seeds. It returns once a node answered (with that node's address), or
// all failed, or ctx ended, after every question it started has ended
// (they end with it).
func (b *Broker) firstSlots(ctx context.Context, sources []slotSource) (shardcast.SlotMap, string, error) {
	ctx, cancel := context.WithCancel(ctx)
	type answer struct {
		m    shardcast.SlotMap
		from string
		err  error
	}
	answers := make(chan answer, len(sources))
	var wg sync.WaitGroup
	defer func() {
		cancel() // ends the questions still open
		wg.Wait()
	}()
	ask := func(src slotSource) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := answer{from: src.addr}
			if src.pub != nil {
				a.m, a.err = b.slotsFrom(ctx, src.pub)
			} else {
				a.m, a.err = b.slotsOnce(ctx, src.addr)
			}
			answers <- a
		}()
	}
	stagger := time.NewTimer(time.Hour)
	defer stagger.Stop()
	var errs []error
	next, pending := 0, 0
	for {
		if pending == 0 && next < len(sources) {
			ask(sources[next])
			next, pending = next+1, pending+1
			stagger.Reset(min(pollStagger, b.cfg.SlotsTimeout))
		}
		if pending == 0 {
			return shardcast.SlotMap{}, "", errors.Join(errs...)
		}
		select {
		case a := <-answers:
			pending--
			if a.err == nil {
				return a.m, a.from, nil
			}
			errs = append(errs, a.err)
		case <-stagger.C:
			if next < len(sources) {
				ask(sources[next])
				next, pending = next+1, pending+1
				stagger.Reset(min(pollStagger, b.cfg.SlotsTimeout))
			}
		case <-ctx.Done():
			// The questions end with ctx; their errors say why.
			for ; pending > 0; pending-- {
				errs = append(errs, (<-answers).err)
			}
			return shardcast.SlotMap{}, "", errors.Join(errs...)
		}
	}
}

// slotsOnce asks the node at addr for CLUSTER SLOTS on a connection of
// its own, made (bounded by DialTimeout) for the question and closed after
// it.
func (b *Broker) slotsOnce(ctx context.Context, addr string) (shardcast.SlotMap, error) {
	pub := pubconn.New(b.cfg.dialer(addr), engine.PubTimeouts(b.cfg.Conn))
	defer pub.Close()
	dialCtx, cancel := context.WithTimeout(ctx, b.cfg.Conn.DialTimeout)
	err := pub.Ping(dialCtx)
	cancel()
	if err != nil {
		if cause := context.Cause(ctx); cause != nil {
			err = cause // the timeout, or why ctx ended, rather than "canceled"
		}
		return shardcast.SlotMap{}, fmt.Errorf("%s: %w", addr, err)
	}
	return b.slotsFrom(ctx, pub)
}

// slotsFrom asks the node pub reaches for CLUSTER SLOTS, bounded by
// SlotsTimeout.
func (b *Broker) slotsFrom(ctx context.Context, pub *pubconn.Pub) (shardcast.SlotMap, error) {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.SlotsTimeout)
	defer cancel()
	reply, err := pub.Do(ctx, "CLUSTER", "SLOTS")
	if err != nil {
		return shardcast.SlotMap{}, fmt.Errorf("%s: %w", pub.Addr(), err)
	}
	m, err := ParseSlots(reply, pub.Addr())
	if err == nil && len(m.Ranges) == 0 {
		err = errors.New("empty slot map")
	}
	if err != nil {
		return shardcast.SlotMap{}, fmt.Errorf("%s: %w", pub.Addr(), err)
	}
	return m, nil
}

// confirmMoves keeps a partition on its current master when the master
// the polled map moves it to does not claim the slot itself. The node that
// answered the poll may not have heard of a slot move yet (resharding tells
// the new owner first, the rest later), and following its stale map would
// move subscriptions away and back again. A destination is asked on the
// broker's publishing connection to it (opened now if need be: it is
// about to carry the moved partitions' publishes); one that cannot be
// asked is trusted.
//
// A map that names no master for the slot of a partition that has one is
// not followed either: failovers and migrations hand a slot from master to
// master, so a gap is a node's partial view (a node that lost its slot
// table, one caught mid-way through a config update or a failover) or an
// operator's DELSLOTS. Following it would interrupt the partition and
// resubscribe it a moment later. If the master really lost the slot, it
// pushes the unsubscribes itself, which interrupt the partition then.
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
		if dest == "" {
			next[p] = old[p]
			continue
		}
		if dest == old[p] {
			continue
		}
		view, asked := views[dest]
		if !asked {
			if pub := b.pubFor(dest); pub != nil {
				if m, err := b.slotsFrom(ctx, pub); err == nil {
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
// master assignment and where each partition is subscribed (placement),
// interrupts the partitions whose subscribe node changed so that heal
// resubscribes them there, opens connections to new nodes and closes
// those to departed ones.
//
// Order on a move: the new node is subscribed only after its shard owns
// the slot (earlier it would answer MOVED), and the old node has by then
// dropped the subscriptions itself with a pushed sunsubscribe (or is
// gone), or carries nothing more and has its connection closed, so the
// broker never sends an explicit unsubscribe to the old node. A message
// the old and the new node of one shard both deliver is fenced off (see
// engine.Move.Failover); the price of a move is a short gap, reported as
// Interrupted/Restored.
//
// Moved partitions are interrupted before any connection is opened or
// closed: a new node's connection resubscribes its partitions as soon as
// it is up, and interrupting them after that would report a loss that did
// not happen and subscribe them a second time.
func (b *Broker) applySlots(ctx context.Context, slots shardcast.SlotMap) {
	assign := b.confirmMoves(ctx, slots.Assign(b.layout.Slot, b.view.Load().span()))
	b.mu.Lock()
	if b.stopping {
		b.mu.Unlock()
		return
	}
	old, oldSlots, oldSubs := b.assign, b.slots, b.subs
	subs := placement(b.cfg.SubscribeOn, b.placeSeq, slots, assign, b.avoidingLocked(time.Now()))
	b.slots, b.assign, b.subs = slots, assign, subs
	failover := b.shards.classifier(old, oldSlots, slots, b.layout.Slot)
	b.shards = b.shards.update(slots)
	stale := b.routeLocked(assign)
	var started, stopped []*engine.Link
	// keep maps a node to its live wires: a moved partition already
	// active there was resubscribed by a Subscribe racing this update.
	keep := make(map[string][]*subconn.Conn)
	// healthy maps each node to when its wires last proved healthy: a
	// partition that moved away stopped delivering at some point after.
	healthy := make(map[string]time.Time)
	if b.core.Paths != nil {
		want := make(map[string]bool)
		for _, addr := range subs {
			if addr != "" {
				want[addr] = true
			}
		}
		for addr, links := range b.nodes {
			for _, l := range links {
				if t := l.LastHealthy(); !t.IsZero() && (healthy[addr].IsZero() || t.Before(healthy[addr])) {
					healthy[addr] = t
				}
				keep[addr] = append(keep[addr], l.Current())
			}
			if !want[addr] {
				delete(b.nodes, addr)
				delete(keep, addr)
				stopped = append(stopped, links...)
			}
		}
		for addr := range want {
			if _, ok := b.nodes[addr]; !ok {
				links := make([]*engine.Link, b.cfg.Conn.SubscribeConns)
				for i := range links {
					links[i] = b.core.NewLink(b.cfg.subDialer(addr), i, b.messages, b.onLost)
				}
				b.nodes[addr] = links
				started = append(started, links...)
			}
		}
		masters := assign.Masters()
		for addr, links := range b.nodes {
			_, master := slices.BinarySearch(masters, addr)
			for _, l := range links {
				l.Relayed.Store(!master)
			}
		}
	}
	b.mu.Unlock()
	b.readers.Keep(func(addr string) bool { return slices.Contains(subs, addr) })

	if old != nil {
		b.reportMoves(moveSet{old: old, assign: assign, oldSubs: oldSubs, subs: subs}, failover, keep, healthy)
	}
	for _, l := range started {
		l.Start()
	}
	for _, l := range stopped {
		l.Stop()
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
		pub := b.pubForLocked(addr)
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
// any more, after ReplyTimeout: publishes already sent on it get their
// replies (a MOVED sends them on to the slot's new master) instead of an
// error.
func (b *Broker) retire(p *pubconn.Pub) {
	b.core.Go(func() {
		t := time.NewTimer(b.cfg.Conn.ReplyTimeout)
		defer t.Stop()
		select {
		case <-t.C:
		case <-b.core.Closing():
		}
		p.Close()
	})
}

// moveSet is one slot-map change: the partitions' masters and the nodes
// they are subscribed on, before and after.
type moveSet struct {
	old, assign, oldSubs, subs shardcast.Assignment
}

// reportMoves reports the assignment change and interrupts the partitions
// whose subscribe node changed and that are not already active on their
// new node's wire (keep). The loss of a moved partition dates from when
// its old node was last known healthy. A move between two nodes of one
// shard is fenced like a failover (both deliver the shard's messages). A
// partition that stays subscribed on a replica while its master fails
// over needs nothing here: the replica pushes sunsubscribes as its old
// master's slots leave it, and the resubscribe is reported Restored only
// once a probe came back through it (engine.Link.Relayed); were a
// replica to stay quiet without them, its probes would find it silent.
func (b *Broker) reportMoves(ms moveSet, failover func(mv partitionMove) bool, keep map[string][]*subconn.Conn, healthy map[string]time.Time) {
	masterMoves := inUse(ms.old, ms.assign, movedPartitions(ms.old, ms.assign))
	subMoves := inUse(ms.oldSubs, ms.subs, movedPartitions(ms.oldSubs, ms.subs))
	fenced := make(map[int]bool)
	if len(masterMoves) > 0 {
		b.topologyChanges.Add(1)
		ev := shardcast.Event{Kind: shardcast.EventTopologyChanged, Since: time.Now()}
		failovers, migrations, ownerless := 0, 0, 0
		for _, mv := range masterMoves {
			ev.Partitions = append(ev.Partitions, mv.Partition)
			switch {
			case failover(mv):
				fenced[mv.Partition] = true
				failovers++
			case mv.From != "" && mv.To != "":
				migrations++
			default:
				ownerless++ // from or to no master
			}
		}
		b.failoverMoves.Add(uint64(failovers))
		b.migrationMoves.Add(uint64(migrations))
		b.ownerlessMoves.Add(uint64(ownerless))
		added, removed := masterChanges(ms.old, ms.assign)
		b.core.Log.Info("shardcast: topology changed", "moved_partitions", len(masterMoves), "failover_partitions", failovers,
			"added_masters", added, "removed_masters", removed)
		b.core.Emitter.Emit(ev)
	}
	if len(subMoves) == 0 {
		return
	}
	now := time.Now()
	moves := make([]engine.Move, 0, 2*len(subMoves))
	for _, mv := range subMoves {
		since := now
		if t, ok := healthy[mv.From]; ok && t.Before(since) {
			since = t
		}
		sameMaster := ms.old[mv.Partition] == ms.assign[mv.Partition]
		m := engine.Move{Path: mv.Partition, From: mv.From, To: mv.To, Since: since,
			Failover: fenced[mv.Partition] || (sameMaster && mv.From != "" && mv.To != "")}
		if wires := keep[mv.To]; len(wires) > 0 {
			m.Keep = wires[mv.Partition%len(wires)]
		}
		moves = append(moves, m)
		m.Path += bankSize // the partition's path in the other bank
		moves = append(moves, m)
	}
	b.core.InterruptMoved(moves, func(from, to string) error {
		return fmt.Errorf("%w: from %s to %s", shardcast.ErrPartitionMoved, from, to)
	})
}

// shardMemory maps each replica the broker saw in a slot map to the master
// it serves, and keeps it across maps that leave the replica out. CLUSTER
// SLOTS lists only the replicas Redis deems available: not one marked
// failed, and not one whose replication offset is still 0, which is every
// replica for up to repl-ping-replica-period (10 s by default) after its
// master restarted without data and no write has moved the offset since
// (Pub/Sub is not replicated) — after a full restart of the cluster, the
// map names no replica at all. A failover in that window, judged by the
// map alone, would look like a slot migration: no fence would go up, and
// the copies the demoted master's shard relays would be delivered twice.
// A remembered entry is replaced when a map lists the node again (as a
// replica of another master, or as a master).
type shardMemory map[string]string

// update returns the memory after slots: every node slots lists is
// recorded afresh, the others are kept. m is not modified.
func (m shardMemory) update(slots shardcast.SlotMap) shardMemory {
	next := maps.Clone(m)
	if next == nil {
		next = make(shardMemory)
	}
	for _, r := range slots.Ranges {
		delete(next, r.Master)
	}
	for _, r := range slots.Ranges {
		for _, replica := range r.Replicas {
			next[replica] = r.Master
		}
	}
	return next
}

// classifier returns the failover test of the moves from the map before
// to the map after: a partition that may have moved from one node to
// another of the same shard, so that copies of its messages may still come
// from the old node (see engine.Move). No map can be trusted to name every
// replica (see shardMemory; a master demoted seconds ago can be missing
// from every list), so the test errs on the side of the fence: a move is a
// failover when the new master carried no partition in the assignment
// before (a replica never does; the assignment, not the raw map before,
// which may be a node's stale view that confirmMoves did not follow),
// when it was the old one's replica in the map before or in the memory m
// (taken before after was recorded), or when the old master is already
// listed as the new one's replica. Only a move to a master that already
// carried partitions is taken for a migration to another shard. The price
// of a false alarm (slots migrated to a master that carried none, when a
// master is added) is the fences of a failover for the moved partitions: for
// 2 x HealthInterval, a message stamped before one its channel already
// delivered is dropped and reported rather than delivered late.
func (m shardMemory) classifier(assigned shardcast.Assignment, before, after shardcast.SlotMap, slotOf func(int) uint16) func(mv partitionMove) bool {
	owned := make(map[string]bool)
	for _, addr := range assigned {
		owned[addr] = true
	}
	return func(mv partitionMove) bool {
		if mv.From == "" {
			return false // nothing delivered it before
		}
		slot := slotOf(mv.Partition)
		return !owned[mv.To] || m[mv.To] == mv.From || wasReplica(before, slot, mv.To) || wasReplica(after, slot, mv.From)
	}
}

// wasReplica reports whether addr was listed as a replica of the master
// of slot in m: a move of that slot to addr is a failover.
func wasReplica(m shardcast.SlotMap, slot uint16, addr string) bool {
	for _, r := range m.Ranges {
		if slot >= r.Start && slot <= r.End {
			return slices.Contains(r.Replicas, addr)
		}
	}
	return false
}
