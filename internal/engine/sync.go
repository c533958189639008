package engine

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sort"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/subconn"
)

// Sync subscribes, on wire (l's), every listed path that l carries and
// that is not already active there, one path per command group, spread
// over the resubscriber's workers. Paths that fail stay interrupted and
// are retried by the maintenance loop.
func (c *Core) Sync(l *Link, wire *subconn.Conn, ids []int) {
	if len(ids) == 0 || c.Paths == nil || l.Unconfirmed() {
		return // an unconfirmed link's paths wait for its confirmation
	}
	sort.Ints(ids)
	var locked []*Path
	defer func() {
		for _, p := range locked {
			p.unlock()
		}
	}()
	// Stopping the link or closing the broker ends a sync at once, even
	// one stuck on a frozen server. CommandTimeout bounds the wait for the
	// paths' turns and each command, not the whole sync: resubscribing a
	// million channels takes thousands of round trips, and a deadline on
	// all of them would cut every attempt short on a slow link, for good.
	// A command that times out ends the sync: the node stopped answering,
	// and every other command would wait out the same timeout.
	ctx, stop := context.WithCancel(l.ctx)
	defer stop()
	lockCtx, cancel := context.WithTimeout(ctx, c.Conn.CommandTimeout)
	defer cancel()
	for _, id := range ids {
		p := c.Paths[id]
		if err := p.lock(lockCtx, c.closing); err != nil {
			return
		}
		locked = append(locked, p)
	}
	// groups[i] resubscribes syncs[i].p; both are in ascending path
	// order, as ids are.
	groups := make([]shardcast.Group, 0, len(locked))
	syncs := make([]pathSync, 0, len(locked))
	var empty []*Path
	carriers := c.router.Carriers(ids)
	for i, p := range locked {
		if carriers[i] != l {
			continue
		}
		if p.ActiveWire() == wire {
			continue
		}
		chans := p.Wanted()
		if len(chans) == 0 {
			empty = append(empty, p)
			continue
		}
		ps := pathSync{p: p, wanted: chans, seq: p.lostSeq(), prefix: c.router.KeyPrefix(p.ID)}
		if p.probe != nil {
			// Into the list's spare room (see ChannelSet.Slice): the
			// Restored's list, wanted, ends before it.
			chans = append(chans, p.probe.channel)
		}
		groups = append(groups, shardcast.Group{Key: p.ID, Channels: chans})
		syncs = append(syncs, ps)
	}
	for _, p := range empty {
		p.setOwner(l)
		p.activate(wire)
	}
	if len(groups) == 0 {
		return
	}
	for i := range syncs {
		ps := &syncs[i]
		ps.failover = ps.p.failover.Load()
		ps.prev = ps.p.setOwner(l)
	}
	report := c.resub.RunPacked(ctx, groups, func(ctx context.Context, cmds []shardcast.Group) []error {
		cmdCtx, cancel := context.WithTimeout(ctx, c.Conn.CommandTimeout)
		defer cancel()
		pre, batches := make([]string, len(cmds)), make([][]string, len(cmds))
		for i, cmd := range cmds {
			k, _ := slices.BinarySearchFunc(groups, cmd.Key, func(g shardcast.Group, key int) int { return cmp.Compare(g.Key, key) })
			pre[i], batches[i] = syncs[k].prefix, cmd.Channels
		}
		errs := wire.SubscribePrefixed(cmdCtx, pre, batches)
		for _, err := range errs {
			if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
				stop()
				break
			}
		}
		return errs
	})
	l.resubscribeCommands.Add(uint64(report.Commands))
	failed := make(map[int]bool, len(report.FailedKeys))
	for _, k := range report.FailedKeys {
		failed[k] = true
	}
	var restored []*Path
	var lists [][]string
	var since time.Time
	c.ledger.mu.Lock()
	for _, ps := range syncs {
		p := ps.p
		// A link stopped meanwhile left the topology: activating the path
		// on its wire, closing now, would only be undone (see
		// Link.abandoned).
		if failed[p.ID] || l.ctx.Err() != nil {
			p.keepOwner(ps.prev, ps.failover)
			continue
		}
		s, ok := p.activateIf(wire, ps.seq, l.Relayed.Load())
		if !ok {
			p.keepOwner(ps.prev, ps.failover)
			// A slot move overtook the confirmation; the next heal retries
			// on whichever node owns the slot by then.
			c.RequestRefresh()
			continue
		}
		if !s.IsZero() {
			restored = append(restored, p)
			lists = append(lists, ps.wanted)
			if since.IsZero() || s.Before(since) {
				since = s
			}
		}
	}
	if len(restored) > 0 {
		c.ledger.restored(l.Addr, restored, lists, since)
	}
	c.ledger.mu.Unlock()
	if report.Err != nil {
		c.Log.Warn("shardcast: resubscribe incomplete; retrying", "node", l.Addr, c.pathsAttr(report.FailedKeys), "err", report.Err)
		if IsMoved(report.Err) {
			c.RequestRefresh()
		}
	}
	c.signalChange()
}

// pathSync is what Sync keeps of a path it resubscribes.
type pathSync struct {
	p *Path
	// wanted are the path's wanted channels, without its probe: what its
	// Restored names. The path's turn, held to the end, keeps them as
	// they are.
	wanted []string
	seq    uint64 // p.lostSeq() before the command
	prefix string // its wire keys' prefix (see Router.KeyPrefix)
	// prev and failover are the path's owner and failover mark before
	// the Sync took it, restored when the path stays interrupted.
	prev     *Link
	failover bool
}

// heal resubscribes every interrupted path whose link is up. Each link
// heals on its own goroutine: one slow or frozen node must not hold up
// the others, nor the next maintenance pass. A path nobody wants a
// channel of is left alone: the first Subscribe on it activates it, with
// no command (see reactivate), and a broker holds thousands of them.
func (c *Core) heal() {
	if c.Paths == nil {
		return
	}
	ids := c.healIDs[:0]
	for i := range c.states {
		if c.states[i].nWanted.Load() > 0 {
			ids = append(ids, i)
		}
	}
	c.healIDs = ids
	jobs := make(map[*Link][]int)
	wires := make(map[*Link]*subconn.Conn) // each link's wire, read once
	var order []*Link
	for i, l := range c.router.Carriers(ids) {
		if l == nil {
			continue
		}
		wire, seen := wires[l]
		if !seen {
			wire = l.Current()
			wires[l] = wire
		}
		if wire == nil || c.states[ids[i]].active() == wire {
			continue
		}
		if _, ok := jobs[l]; !ok {
			order = append(order, l)
		}
		jobs[l] = append(jobs[l], ids[i])
	}
	for _, l := range order {
		wire := wires[l]
		if !l.syncing.CompareAndSwap(false, true) {
			continue
		}
		c.Go(func() {
			defer l.syncing.Store(false)
			c.Sync(l, wire, jobs[l])
		})
	}
}

// Degraded reports whether some wanted path is interrupted, or some link
// is down, slow to answer its health ping or waiting for its
// confirmation (see Link.Confirm).
func (c *Core) Degraded() bool {
	for _, l := range c.router.Links() {
		if l.Current() == nil || l.Slow() || l.Unconfirmed() {
			return true
		}
	}
	for i := range c.states {
		if s := &c.states[i]; s.nWanted.Load() > 0 && s.active() == nil {
			return true
		}
	}
	return false
}

// Maintain runs the broker's maintenance loop until Close: every idle
// (never, when idle is zero) while all is well, every RecoveryInterval
// while something is degraded, and when asked (RequestRefresh at once,
// Kick spaced by RecoveryInterval), it calls poll (if set: the engine
// re-reads its topology), then heals interrupted paths.
func (c *Core) Maintain(idle time.Duration, poll func(ctx context.Context)) {
	c.Go(func() {
		var polled time.Time
		for {
			interval := idle
			if c.Degraded() {
				interval = c.Conn.RecoveryInterval
			}
			if !c.awaitPass(interval, polled) {
				return
			}
			polled = time.Now()
			if poll != nil {
				ctx, cancel := context.WithTimeout(c.ctx, c.Conn.CommandTimeout)
				poll(ctx)
				cancel()
			}
			c.heal()
			c.signalChange()
		}
	})
}

// awaitPass waits until the next maintenance pass is due: after interval
// (never, when it is zero), at once when RequestRefresh asked, or when
// Kick asked but no sooner than RecoveryInterval after the previous pass
// (at last). It returns false when the broker is closing.
func (c *Core) awaitPass(interval time.Duration, last time.Time) bool {
	var due <-chan time.Time
	if interval > 0 {
		timer := time.NewTimer(interval)
		defer timer.Stop()
		due = timer.C
	}
	select {
	case <-c.closing:
		return false
	case <-c.refresh:
		return true
	case <-due:
		return true
	case <-c.kick:
	}
	if wait := time.Until(last.Add(c.Conn.RecoveryInterval)); wait > 0 {
		spacing := time.NewTimer(wait)
		defer spacing.Stop()
		select {
		case <-c.closing:
			return false
		case <-c.refresh:
		case <-spacing.C:
		}
	}
	return true
}

// Move is one path that a topology change moved between nodes.
type Move struct {
	Path     int
	From, To string
	// Since is when the path's old node was last known healthy: messages
	// may be lost from then on.
	Since time.Time
	// Keep is the new node's wire for the path; a path already active on
	// it (a Subscribe re-activated it first) is not interrupted.
	Keep *subconn.Conn
	// Failover is set when To was a replica of From: the old node, not yet
	// aware of its demotion, may still deliver for a moment what the new
	// one delivers too, so the path fences off such copies (see
	// Path.setOwner). A slot migrated to another shard brings no copies.
	Failover bool
}

// InterruptMoved interrupts the moved paths not already active on their
// new node's wire and reports them, one Interrupted event per old → new
// node pair with cause(from, to) as its Err. The paths stay locked
// (ascending, the only place that holds several) until the events are
// queued, so that a Subscribe re-activating one of them cannot report it
// Restored before it is reported Interrupted.
func (c *Core) InterruptMoved(moves []Move, cause func(from, to string) error) {
	if c.Paths == nil || len(moves) == 0 {
		return
	}
	sort.Slice(moves, func(i, j int) bool { return moves[i].Path < moves[j].Path })
	c.ledger.mu.Lock()
	defer c.ledger.mu.Unlock()
	for _, mv := range moves {
		c.Paths[mv.Path].mu.Lock()
	}
	defer func() {
		for _, mv := range moves {
			c.Paths[mv.Path].mu.Unlock()
		}
	}()
	type route struct{ from, to string }
	type report struct {
		paths []*Path
		lists [][]string
		since time.Time // the Since of the route's first move dates its event
	}
	lost := make(map[route]*report)
	var order []route
	for _, mv := range moves {
		p := c.Paths[mv.Path]
		// Set whether or not the path is still active on its old wire:
		// the copies come over the bus to the new node either way.
		p.failover.Store(mv.Failover)
		if w := p.wire.Load(); w == nil || w != mv.Keep {
			// Voids a (re)subscribe in flight on the old node, whose
			// confirmation would otherwise activate the path there
			// after the move and end an interruption never reported.
			p.lost++
		}
		chans, ok := p.interruptUnlessLocked(mv.Keep, mv.Since)
		if !ok {
			continue
		}
		r := route{mv.From, mv.To}
		e := lost[r]
		if e == nil {
			e = &report{since: mv.Since}
			lost[r] = e
			order = append(order, r)
		}
		e.paths = append(e.paths, p)
		e.lists = append(e.lists, chans)
	}
	for _, r := range order {
		e := lost[r]
		c.ledger.interrupted(r.from, e.paths, e.lists, e.since, cause(r.from, r.to))
	}
}
