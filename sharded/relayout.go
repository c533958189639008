package sharded

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/agreement"
	"github.com/shardcast/shardcast/internal/engine"
	"github.com/shardcast/shardcast/internal/pubconn"
)

// follower takes the broker through the online re-layouts of its
// application (docs/RELAYOUT.md): every heartbeat it reads the transition
// on the control instance, catches up with its phase and acknowledges.
// Its state is only touched by its own goroutine (and by start, before
// that runs).
type follower struct {
	b              *Broker
	a              shardcast.Agreement
	run            agreement.Runner
	barrierTimeout time.Duration

	id    string // the re-layout followed, "" for none
	stage int
	to    shardcast.LayoutRecord
	// from is the layout the broker registered with when the re-layout
	// began: it registers with to once it publishes there (switch), and
	// with from again if it returns (abort), so that a heartbeat that must
	// write the record again (the control instance lost it) writes the
	// layout the broker publishes under.
	from shardcast.LayoutRecord
	// since dates the current stage, for the events; drainAt is when the
	// broker began to wait for its barriers.
	since, drainAt time.Time
	moving         int
	// unanswered is the route a step replaced while publishes sent under
	// it may still be unanswered: the step is not done until they are,
	// even when it is retried after its ctx ended.
	unanswered *route
	// graceUntil is when a broker back on the old layout after an unclean
	// end drops the new layout's subscriptions (see vanished).
	graceUntil time.Time
}

const (
	stageNone = iota
	stagePrepared
	stageSwitched
	stageDrained
	stageFinished
	stageAborted
)

func newFollower(b *Broker, a shardcast.Agreement, control *pubconn.Pub, barrierTimeout time.Duration) *follower {
	if barrierTimeout == 0 {
		barrierTimeout = max(2*time.Second, shardcast.HeartbeatsToExpire*a.Heartbeat)
	}
	return &follower{b: b, a: a, barrierTimeout: barrierTimeout,
		run: func(ctx context.Context, s *shardcast.Script, keys, args []string) (any, error) {
			return engine.Eval(ctx, control, s, keys, args)
		}}
}

// start catches up with a re-layout under way before New returns, so
// that the broker never publishes a moving channel under a layout the
// fleet left, then follows on a goroutine Close waits for.
func (f *follower) start() error {
	if f == nil {
		return nil
	}
	b := f.b
	ctx, cancel := context.WithTimeout(b.core.Ctx(), b.conn.DialTimeout+b.conn.CommandTimeout)
	f.step(ctx)
	cancel()
	b.core.Go(func() {
		tick := time.NewTicker(f.a.Heartbeat)
		defer tick.Stop()
		for {
			select {
			case <-b.core.Closing():
				return
			case <-tick.C:
			}
			ctx, cancel := context.WithTimeout(b.core.Ctx(), b.conn.CommandTimeout+f.a.Heartbeat)
			f.step(ctx)
			cancel()
		}
	})
	return nil
}

// step reads the transition and does what its phase asks of the broker.
func (f *follower) step(ctx context.Context) {
	st, err := agreement.ReadTransition(ctx, f.run, f.a)
	if err != nil {
		f.b.core.Log.Debug("shardcast: reading the re-layout failed", "err", err)
		return
	}
	t := st.T
	if f.id != "" && (t == nil || t.ID != f.id) {
		f.ended(ctx) // it ended while we were not looking
		return
	}
	if t == nil {
		return
	}
	done := func(phase string) {
		if st.Acked(f.b.member.ID()) {
			return
		}
		if _, err := agreement.Ack(ctx, f.run, f.a, f.b.member.ID(), t.ID, phase); err != nil {
			f.b.core.Log.Warn("shardcast: re-layout acknowledgement failed", "phase", phase, "err", err)
		}
	}
	if t.Phase == shardcast.PhaseAbort {
		if f.id == t.ID && !f.abort(ctx) {
			return
		}
		done(shardcast.PhaseAbort)
		return
	}
	if !f.prepare(ctx, t) {
		return
	}
	if t.Phase == shardcast.PhasePrepare {
		done(t.Phase)
		return
	}
	if !f.switchOver(ctx) {
		return
	}
	switch t.Phase {
	case shardcast.PhaseSwitch:
		done(t.Phase)
	case shardcast.PhaseDrain:
		if f.drain(ctx) {
			done(t.Phase)
		}
	case shardcast.PhaseFinish:
		if f.finish(ctx) {
			done(t.Phase)
		}
	}
}

// emit reports a completed stage.
func (f *follower) emit(phase string, err error) {
	now := time.Now()
	f.b.core.Emitter.Emit(shardcast.Event{Kind: shardcast.EventRelayout, Phase: phase, Since: f.since,
		Until: now, Count: uint64(f.moving), Err: err})
	f.since = now
}

// prepare subscribes the broker's moving channels under the new layout,
// and the barrier channel on its connections to the instances that lose
// channels, and starts holding back what they bring.
func (f *follower) prepare(ctx context.Context, t *agreement.Transition) bool {
	if f.id == t.ID && f.stage >= stagePrepared {
		return true
	}
	b := f.b
	r := b.route.Load()
	from := r.addrs
	if r.fp != t.From {
		// A broker configured with the new list, started mid-way: it
		// starts from the record's layout, as the fleet does.
		st, err := agreement.Read(ctx, f.run, f.a)
		if err != nil || st.Record == nil || st.Record.Fingerprint != t.From || r.fp != t.To {
			b.core.Emitter.Emit(shardcast.Event{Kind: shardcast.EventError, Since: time.Now(),
				Err: fmt.Errorf("shardcast: cannot follow re-layout %s from %s to %s: this broker's layout is %s", t.ID, t.From, t.To, r.fp)})
			return false
		}
		from = st.Record.Instances
	}
	to := t.ToRecord.Instances
	if f.id != t.ID {
		f.since = time.Now()
	}
	cur, err := b.slotsFor(ctx, from)
	if err != nil {
		b.core.Log.Warn("shardcast: re-layout prepare", "err", err)
		return false
	}
	next, err := b.slotsFor(ctx, to)
	if err != nil {
		b.core.Log.Warn("shardcast: re-layout prepare", "err", err)
		return false
	}
	if err := b.gate.Lock(ctx, b.core.Closing()); err != nil {
		return false
	}
	defer b.gate.Unlock()
	var need []int
	if b.core.Paths != nil {
		for _, i := range losing(from, to) {
			for j := range b.conns {
				need = append(need, cur[i]*b.conns+j)
			}
		}
	}
	nr := &route{cur: cur, addrs: from, fp: t.From, next: next, nextFP: t.To, id: t.ID, barrier: t.Barrier}
	if f.id != t.ID || !slices.Equal(r.next, next) {
		b.hand.Reset(need)
		b.route.Store(nr)
	} else {
		nr = r
	}
	if f.id != t.ID {
		f.from = b.member.Layout()
	}
	f.id, f.to = t.ID, t.ToRecord
	if b.core.Paths != nil {
		groups := map[int][]string{}
		f.moving = 0
		for p, path := range b.core.Paths {
			for _, ch := range path.Wanted() {
				if ch == nr.barrier {
					continue
				}
				c, n := nr.slots(ch)
				if c != n && p/b.conns == c {
					q := n*b.conns + p%b.conns
					groups[q] = append(groups[q], ch)
					f.moving++
				}
			}
		}
		for _, p := range need {
			groups[p] = append(groups[p], nr.barrier)
		}
		if err := b.core.SubscribeGroups(ctx, toGroups(groups)); err != nil {
			b.core.Log.Warn("shardcast: re-layout prepare: subscribing under the new layout failed; retrying", "err", err)
			return false
		}
	}
	f.stage = stagePrepared
	f.emit(shardcast.PhasePrepare, nil)
	return true
}

func toGroups(m map[int][]string) []shardcast.Group {
	out := make([]shardcast.Group, 0, len(m))
	for p, chans := range m {
		out = append(out, shardcast.Group{Key: p, Channels: chans})
	}
	return out
}

// replace stores a copy of the route that change altered (unless the
// route in force already has want), and waits until every publish of a
// moving channel sent under the old one was answered. A wait that ctx cut
// short is resumed by the next call: the route it replaced is kept in
// f.unanswered.
func (f *follower) replace(ctx context.Context, want bool, change func(r *route)) bool {
	b := f.b
	if old := b.route.Load(); old.switched != want {
		nr := &route{cur: old.cur, addrs: old.addrs, fp: old.fp, next: old.next, nextFP: old.nextFP,
			id: old.id, barrier: old.barrier, switched: old.switched}
		change(nr)
		b.route.Store(nr)
		f.unanswered = old
	}
	old := f.unanswered
	if old == nil {
		return true
	}
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for old.inflight.Load() > 0 {
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
	}
	f.unanswered = nil
	return true
}

// switchOver publishes moving channels under the new layout from now on,
// once every publish under the old one was answered.
func (f *follower) switchOver(ctx context.Context) bool {
	if f.stage >= stageSwitched {
		return true
	}
	if !f.replace(ctx, true, func(r *route) { r.switched = true }) {
		return false
	}
	f.b.member.SetLayout(f.to)
	f.stage = stageSwitched
	f.emit(shardcast.PhaseSwitch, nil)
	return true
}

// drain waits, for at most one heartbeat, for the barriers; past the
// broker's BarrierTimeout it hands over without them.
func (f *follower) drain(ctx context.Context) bool {
	if f.stage >= stageDrained {
		return true
	}
	if f.drainAt.IsZero() {
		f.drainAt = time.Now()
	}
	wait := time.NewTimer(min(f.a.Heartbeat, time.Until(f.drainAt.Add(f.barrierTimeout))))
	defer wait.Stop()
	select {
	case <-f.b.hand.Done():
	case <-wait.C:
		if time.Since(f.drainAt) < f.barrierTimeout {
			return false
		}
		f.b.core.Log.Warn("shardcast: re-layout barriers did not come; delivering what was held back", "paths", f.b.hand.Waiting())
		f.b.hand.Force(shardcast.PhaseBarrierTimeout)
	case <-ctx.Done():
		return false
	}
	f.drainAt = time.Time{}
	f.stage = stageDrained
	f.emit(shardcast.PhaseDrain, nil)
	return true
}

// finish makes the new layout the broker's and drops the subscriptions
// the old one needed.
func (f *follower) finish(ctx context.Context) bool {
	if f.stage >= stageFinished {
		return true
	}
	b := f.b
	b.hand.Force(shardcast.PhaseBarrierTimeout)
	if err := b.gate.Lock(ctx, b.core.Closing()); err != nil {
		return false
	}
	defer b.gate.Unlock()
	old := b.route.Load()
	to := f.to
	nr := &route{cur: old.next, addrs: to.Instances, fp: old.nextFP}
	b.route.Store(nr)
	b.settle(ctx, old.barrier)
	b.member.SetLayout(to)
	f.stage = stageFinished
	f.emit(shardcast.PhaseFinish, nil)
	return true
}

// abort returns the broker to the old layout's publishing and delivers
// what it held back; the subscriptions under the new layout stay until
// the transition ends, so that what was published there still arrives.
func (f *follower) abort(ctx context.Context) bool {
	if f.stage >= stageAborted {
		return true
	}
	if f.stage >= stageFinished {
		return true // too late: the record holds the new layout
	}
	if !f.replace(ctx, false, func(r *route) { r.switched = false }) {
		return false
	}
	f.b.member.SetLayout(f.from)
	f.b.hand.Force(shardcast.PhaseAbort)
	f.stage = stageAborted
	f.emit(shardcast.PhaseAbort, nil)
	return true
}

// ended cleans up after a re-layout that ended: finished (the record holds
// its layout: finish now if the broker did not) or aborted. A transition
// that vanished without either (the control instance lost it, say, in a
// restart without persistence) is an unclean end: the broker waits until
// the record is back and follows it, keeping the subscriptions of the
// layout it leaves for a grace period, since the others may still publish
// there until they notice (see vanished and grace). A broker that finishes
// late (it was not there to see the finish) does the same.
func (f *follower) ended(ctx context.Context) {
	b := f.b
	if f.stage != stageFinished {
		st, err := agreement.Read(ctx, f.run, f.a)
		if err != nil {
			return
		}
		r := b.route.Load()
		if st.Record == nil && f.stage != stageAborted {
			return // the first heartbeat writes it again: follow that
		}
		if st.Record != nil && st.Record.Fingerprint == r.nextFP && f.stage != stageAborted {
			// The others may not all have switched: publish under the new
			// layout, but keep the old one's subscriptions a while.
			if !f.switchOver(ctx) || !f.grace() || !f.finish(ctx) {
				return
			}
		} else {
			if f.stage != stageAborted && !f.vanished(ctx) {
				return
			}
			b.hand.Force(shardcast.PhaseAbort)
			if err := b.gate.Lock(ctx, b.core.Closing()); err != nil {
				return
			}
			nr := &route{cur: r.cur, addrs: r.addrs, fp: r.fp}
			b.route.Store(nr)
			b.settle(ctx, r.barrier)
			b.gate.Unlock()
		}
	}
	f.id, f.stage, f.moving, f.unanswered, f.graceUntil = "", stageNone, 0, nil, time.Time{}
}

// vanished takes the broker back to the old layout after an unclean end,
// in two steps, and reports whether the second is done: first it
// publishes under the old layout again (once its publishes under the new
// one were answered), hands over what it held, and raises an
// EventRelayout of phase abort whose Err wraps ErrRelayoutOrder, naming
// its moving channels (a publisher's last message under the new layout
// and its first under the old one travel on different connections); then
// it waits HeartbeatsToExpire heartbeats, while the rest of the fleet
// notices and stops publishing under the new layout, before the caller
// drops the new layout's subscriptions.
func (f *follower) vanished(ctx context.Context) bool {
	if !f.replace(ctx, false, func(r *route) { r.switched = false }) {
		return false
	}
	if f.graceUntil.IsZero() {
		f.b.member.SetLayout(f.from)
		f.b.hand.Force(shardcast.PhaseAbort)
		now := time.Now()
		f.b.core.Emitter.Emit(shardcast.Event{Kind: shardcast.EventRelayout, Phase: shardcast.PhaseAbort,
			Since: f.since, Until: now, Channels: f.b.twinChannels(), Count: uint64(f.moving),
			Err: fmt.Errorf("%w: re-layout %s ended without this broker's abort (the control instance lost it, or dropped the broker); back on the recorded layout", shardcast.ErrRelayoutOrder, f.id)})
		f.since = now
	}
	return f.grace()
}

// grace reports whether HeartbeatsToExpire heartbeats passed since its
// first call after the re-layout ended: the time the rest of the fleet
// has to notice and stop publishing under the layout the broker leaves.
func (f *follower) grace() bool {
	if f.graceUntil.IsZero() {
		f.graceUntil = time.Now().Add(shardcast.HeartbeatsToExpire * f.a.Heartbeat)
	}
	return !time.Now().Before(f.graceUntil)
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
		if err := b.core.UnsubscribeGroups(ctx, toGroups(groups)); err != nil {
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
		for _, l := range sh.links {
			l.Stop()
		}
		sh.pub.Close()
	}
}

// slotsFor returns the slot of each address, connecting to the instances
// the broker does not use yet.
func (b *Broker) slotsFor(ctx context.Context, addrs []string) ([]int, error) {
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
		d, err := engine.ParseAddr(addr, b.conn)
		if err != nil {
			return nil, err
		}
		sh := &slot{addr: d.Addr, dial: d, pub: pubconn.New(d, engine.PubTimeouts(b.conn))}
		pctx, cancel := context.WithTimeout(ctx, b.conn.DialTimeout)
		err = sh.pub.Ping(pctx)
		cancel()
		if err != nil {
			sh.pub.Close()
			return nil, fmt.Errorf("shardcast: re-layout: connect %s: %w", addr, err)
		}
		if b.core.Paths != nil {
			b.newLinks(free, sh)
		}
		b.slots[free].Store(sh)
		for _, l := range sh.links {
			l.Start()
		}
		out[k] = free
	}
	return out, nil
}
