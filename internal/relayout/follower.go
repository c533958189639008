// Package relayout holds the parts of the online re-layout protocol
// (docs/RELAYOUT.md) that do not depend on the engine: the broker's
// registration and the follower that takes it through the phases, the
// hand-over buffer and the delivery that holds and drops for it, the gate
// that keeps Subscribe calls out while the routing changes, and the
// coordinator's run. An engine supplies how it routes, through the Engine
// interface, and what a coordinator moves, through Mover.
package relayout

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/agreement"
	"github.com/shardcast/shardcast/internal/engine"
)

// Engine is what a broker does at each step of a re-layout. The follower
// calls it from one goroutine at a time.
type Engine interface {
	// Prepare subscribes the broker's moving channels under t's new
	// layout too, subscribes the barrier on the old layout's paths that
	// lose channels, resets the hand-over to wait for those barriers, and
	// starts holding back what moving channels bring under the new
	// layout; it returns how many channels it subscribed twice. from is
	// the layout it starts from, t's old one: the broker's own, or the
	// record's when the broker was configured with t's new layout and
	// started mid-way. It is called again after a failure, and must then
	// keep what it did.
	Prepare(ctx context.Context, t *agreement.Transition, from shardcast.LayoutRecord) (moving int, err error)
	// Route stores a routing that publishes moving channels under the
	// new layout (switched) or the old one, unless the routing in force
	// already does, and returns the in-flight count of the routing it
	// replaced (nil when it replaced none): the publishes of moving
	// channels sent under it and not answered yet. The follower waits for
	// it to reach zero.
	Route(switched bool) (replaced *atomic.Int64)
	// Finish makes the new layout (to) the broker's and drops the
	// subscriptions only the old one needed.
	Finish(ctx context.Context, to shardcast.LayoutRecord) error
	// Revert returns to the old layout alone after an abort ended and
	// drops the subscriptions only the new one needed.
	Revert(ctx context.Context) error
	// Fingerprint is the fingerprint of the layout in force.
	Fingerprint() string
	// NextFingerprint is the fingerprint of the layout the re-layout
	// under way moves to, "" when none is.
	NextFingerprint() string
	// TwinChannels returns, sorted, the moving channels the broker
	// subscribes under the new layout too.
	TwinChannels() []string
}

// ErrCannotFollow is wrapped by the error of a prepare when the broker
// cannot take part in the re-layout (its layout is neither the
// transition's old one nor, with the record holding the old one, its new
// one, or the engine cannot route by the new one or reach an instance
// as the transition names it); the follower raises it in an EventError
// and retries.
var ErrCannotFollow = errors.New("shardcast: cannot follow re-layout")

// FollowerConfig is what newFollower needs.
type FollowerConfig struct {
	Agreement shardcast.Agreement // defaults applied
	// Run executes the agreement's scripts; Member is the broker's
	// registration.
	Run    agreement.Runner
	Member *agreement.Member
	// Core is the broker's engine core (events, log, goroutines), Hand its
	// hand-over buffer, Engine its steps.
	Core   *engine.Core
	Hand   *Handover
	Engine Engine
	// BarrierTimeout bounds the wait for the barriers (0: max(2s, 3
	// heartbeats)); Timeout bounds each script call.
	BarrierTimeout, Timeout time.Duration
}

// Follower takes a broker through the online re-layouts of its
// application: every heartbeat it reads the transition, catches up with
// its phase and acknowledges. Its state is only touched by its own
// goroutine (and by Start, before that runs).
type Follower struct {
	cfg FollowerConfig

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
	// unanswered is the in-flight count of the routing a step replaced
	// while publishes sent under it may still be unanswered: the step is
	// not done until they are, even when it is retried after its ctx
	// ended.
	unanswered *atomic.Int64
	// graceUntil is when a broker back on the old layout after an unclean
	// end drops the new layout's subscriptions (see vanished).
	graceUntil time.Time
	// stuckSince is when the re-layout followed was first seen unable to
	// move on (see unstick); zero while it can.
	stuckSince time.Time
}

const (
	stageNone = iota
	stagePrepared
	stageSwitched
	stageDrained
	stageFinished
	stageAborted
)

// newFollower returns a follower; nil when cfg.Member is nil (the
// agreement is off).
func newFollower(cfg FollowerConfig) *Follower {
	if cfg.Member == nil {
		return nil
	}
	if cfg.BarrierTimeout == 0 {
		cfg.BarrierTimeout = max(2*time.Second, agreement.HeartbeatsToExpire*cfg.Agreement.Heartbeat)
	}
	return &Follower{cfg: cfg}
}

// Start catches up with a re-layout under way before the broker's New
// returns, so that the broker never publishes a moving channel under a
// layout the fleet left, then follows on a goroutine Close waits for.
func (f *Follower) Start() {
	if f == nil {
		return
	}
	core := f.cfg.Core
	ctx, cancel := context.WithTimeout(core.Ctx(), f.cfg.Timeout+core.Conn.DialTimeout)
	f.step(ctx)
	cancel()
	core.Go(func() {
		tick := time.NewTicker(f.cfg.Agreement.Heartbeat)
		defer tick.Stop()
		for {
			select {
			case <-core.Closing():
				return
			case <-tick.C:
			}
			ctx, cancel := context.WithTimeout(core.Ctx(), f.cfg.Timeout+f.cfg.Agreement.Heartbeat)
			f.step(ctx)
			cancel()
		}
	})
}

// step reads the transition and does what its phase asks of the broker.
func (f *Follower) step(ctx context.Context) {
	st, err := agreement.ReadTransition(ctx, f.cfg.Run, f.cfg.Agreement)
	f.unstick(st, err)
	if err != nil {
		f.cfg.Core.Log.Debug("shardcast: reading the re-layout failed", "err", err)
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
		if st.Acked(f.cfg.Member.ID()) {
			return
		}
		if _, err := agreement.Ack(ctx, f.cfg.Run, f.cfg.Agreement, f.cfg.Member.ID(), t.ID, phase); err != nil {
			f.cfg.Core.Log.Warn("shardcast: re-layout acknowledgement failed", "phase", phase, "err", err)
		}
	}
	if t.Phase == shardcast.PhaseFinish && f.id != t.ID && f.cfg.Member.Layout().Fingerprint == t.To {
		// Not part of this re-layout, and already on the layout it
		// finishes on: a broker started after the record changed, or
		// one that saw the re-layout end before a failover of the
		// control instance lost the end and brought the finish back.
		// Nothing is left for it to do; its acknowledgement lets the
		// finish end (a coordinator resuming it ends it).
		done(shardcast.PhaseFinish)
		return
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

// unstick bounds how long a broker holds messages back while the
// re-layout it follows cannot move on: its transition cannot be read (the
// control instance is down) or its coordinator has not called for
// HeartbeatsToExpire heartbeats (it crashed). Either may last for good,
// and the publishers that switched keep publishing under the new layout
// meanwhile, so once that has lasted BarrierTimeout the broker delivers
// what it holds and everything after it directly (EventRelayout of phase
// PhaseStalled), keeping both layouts' subscriptions; the re-layout
// carries on from there if it can.
func (f *Follower) unstick(st agreement.TransitionState, err error) {
	silent := func() bool {
		t := st.T
		return t != nil && t.ID == f.id && !t.SeenAt.IsZero() &&
			st.Now.Sub(t.SeenAt) > agreement.HeartbeatsToExpire*f.cfg.Agreement.Heartbeat
	}
	waiting := f.id != "" && (f.stage == stagePrepared || f.stage == stageSwitched)
	if !waiting || (err == nil && !silent()) {
		f.stuckSince = time.Time{}
		return
	}
	if f.stuckSince.IsZero() {
		f.stuckSince = time.Now()
	}
	if time.Since(f.stuckSince) < f.cfg.BarrierTimeout {
		return
	}
	if f.cfg.Hand.Stall(f.cfg.Engine.TwinChannels) {
		f.cfg.Core.Log.Warn("shardcast: re-layout cannot move on (control instance unreachable or coordinator silent); delivering what was held back",
			"relayout", f.id, "since", f.stuckSince, "err", err)
	}
}

// emit reports a completed stage.
func (f *Follower) emit(phase string, err error) {
	now := time.Now()
	f.cfg.Core.Emitter.Emit(shardcast.Event{Kind: shardcast.EventRelayout, Phase: phase, Since: f.since,
		Until: now, Count: uint64(f.moving), Err: err})
	f.since = now
}

func (f *Follower) prepare(ctx context.Context, t *agreement.Transition) bool {
	if f.id == t.ID && f.stage >= stagePrepared {
		return true
	}
	if f.id != t.ID {
		f.since = time.Now()
		f.from = f.cfg.Member.Layout()
		if f.from.Fingerprint != t.From {
			// Configured with the new layout and started mid-way: the
			// engine's Prepare starts from the record's layout, as the
			// fleet does, and an abort goes back to that one.
			st, err := agreement.Read(ctx, f.cfg.Run, f.cfg.Agreement)
			if err != nil || st.Record == nil || st.Record.Fingerprint != t.From {
				f.cfg.Core.Log.Warn("shardcast: re-layout prepare: cannot read the layout it starts from; retrying", "err", err)
				return false
			}
			f.from = *st.Record
		}
	}
	var n int
	err := f.canFollow(t)
	if err == nil {
		n, err = f.cfg.Engine.Prepare(ctx, t, f.from)
	}
	if err != nil {
		if errors.Is(err, ErrCannotFollow) {
			f.cfg.Core.Emitter.Emit(shardcast.Event{Kind: shardcast.EventError, Since: time.Now(), Err: err})
		} else {
			f.cfg.Core.Log.Warn("shardcast: re-layout prepare failed; retrying", "err", err)
		}
		if f.cfg.Engine.NextFingerprint() == t.To {
			// The engine moves to t's layout already: should t end
			// before the retry succeeds, ended cleans up after it.
			f.id, f.to = t.ID, t.ToRecord
		}
		return false
	}
	f.id, f.to, f.moving = t.ID, t.ToRecord, n
	f.stage = stagePrepared
	f.emit(shardcast.PhasePrepare, nil)
	return true
}

// canFollow refuses, with ErrCannotFollow, a broker whose layout is
// neither t's old one nor its new one (a broker configured with the new
// layout, started mid-way, starts from the record's, as the fleet does).
func (f *Follower) canFollow(t *agreement.Transition) error {
	if fp := f.cfg.Engine.Fingerprint(); fp != t.From && fp != t.To {
		return fmt.Errorf("%w %s from %s to %s: this broker's layout is %s", ErrCannotFollow, t.ID, t.From, t.To, fp)
	}
	return nil
}

// route makes the engine publish moving channels under the new layout
// (switched) or the old one, and waits until every publish of a moving
// channel sent under the routing it replaced was answered. A wait that ctx
// cut short is resumed by the next call: the replaced routing's count is
// kept in f.unanswered.
func (f *Follower) route(ctx context.Context, switched bool) bool {
	if old := f.cfg.Engine.Route(switched); old != nil {
		f.unanswered = old
	}
	old := f.unanswered
	if old == nil {
		return true
	}
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for old.Load() > 0 {
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
func (f *Follower) switchOver(ctx context.Context) bool {
	if f.stage >= stageSwitched {
		return true
	}
	if !f.route(ctx, true) {
		return false
	}
	f.cfg.Member.SetLayout(f.to)
	f.stage = stageSwitched
	f.emit(shardcast.PhaseSwitch, nil)
	return true
}

// drain waits, for at most one heartbeat, for the barriers; past the
// BarrierTimeout it hands over without them.
func (f *Follower) drain(ctx context.Context) bool {
	if f.stage >= stageDrained {
		return true
	}
	if f.drainAt.IsZero() {
		f.drainAt = time.Now()
	}
	wait := time.NewTimer(min(f.cfg.Agreement.Heartbeat, time.Until(f.drainAt.Add(f.cfg.BarrierTimeout))))
	defer wait.Stop()
	select {
	case <-f.cfg.Hand.Done():
	case <-wait.C:
		if time.Since(f.drainAt) < f.cfg.BarrierTimeout {
			return false
		}
		f.cfg.Core.Log.Warn("shardcast: re-layout barriers did not come; delivering what was held back", "paths", f.cfg.Hand.Waiting())
		f.cfg.Hand.Force(shardcast.PhaseBarrierTimeout)
	case <-ctx.Done():
		return false
	}
	f.drainAt = time.Time{}
	f.stage = stageDrained
	f.emit(shardcast.PhaseDrain, nil)
	return true
}

func (f *Follower) finish(ctx context.Context) bool {
	if f.stage >= stageFinished {
		return true
	}
	f.cfg.Hand.Force(shardcast.PhaseBarrierTimeout)
	if err := f.cfg.Engine.Finish(ctx, f.to); err != nil {
		f.cfg.Core.Log.Warn("shardcast: re-layout finish failed; retrying", "err", err)
		return false
	}
	f.cfg.Member.SetLayout(f.to)
	f.stage = stageFinished
	f.emit(shardcast.PhaseFinish, nil)
	return true
}

// abort returns the broker to the old layout's publishing and delivers
// what it held back; the subscriptions under the new layout stay until
// the transition ends, so that what was published there still arrives.
func (f *Follower) abort(ctx context.Context) bool {
	if f.stage >= stageAborted || f.stage == stageFinished {
		return true // done, or too late: the record holds the new layout
	}
	if !f.route(ctx, false) {
		return false
	}
	f.cfg.Member.SetLayout(f.from)
	f.cfg.Hand.Force(shardcast.PhaseAbort)
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
func (f *Follower) ended(ctx context.Context) {
	if f.stage != stageFinished {
		st, err := agreement.Read(ctx, f.cfg.Run, f.cfg.Agreement)
		if err != nil {
			return
		}
		if st.Record == nil && f.stage != stageAborted {
			return // the first heartbeat writes it again: follow that
		}
		if st.Record != nil && st.Record.Fingerprint == f.cfg.Engine.NextFingerprint() && f.stage != stageAborted {
			// The others may not all have switched: publish under the new
			// layout, but keep the old one's subscriptions a while.
			if !f.switchOver(ctx) || !f.grace() || !f.finish(ctx) {
				return
			}
		} else {
			if f.stage != stageAborted && !f.vanished(ctx) {
				return
			}
			f.cfg.Hand.Force(shardcast.PhaseAbort)
			if err := f.cfg.Engine.Revert(ctx); err != nil {
				f.cfg.Core.Log.Warn("shardcast: re-layout: returning to the old layout failed; retrying", "err", err)
				return
			}
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
func (f *Follower) vanished(ctx context.Context) bool {
	if !f.route(ctx, false) {
		return false
	}
	if f.graceUntil.IsZero() {
		f.cfg.Member.SetLayout(f.from)
		f.cfg.Hand.Force(shardcast.PhaseAbort)
		now := time.Now()
		f.cfg.Core.Emitter.Emit(shardcast.Event{Kind: shardcast.EventRelayout, Phase: shardcast.PhaseAbort,
			Since: f.since, Until: now, Channels: f.cfg.Engine.TwinChannels(), Count: uint64(f.moving),
			Err: fmt.Errorf("%w: re-layout %s ended without this broker's abort (the control instance lost it, or dropped the broker); back on the recorded layout", shardcast.ErrRelayoutOrder, f.id)})
		f.since = now
	}
	return f.grace()
}

// grace reports whether HeartbeatsToExpire heartbeats passed since its
// first call after the re-layout ended: the time the rest of the fleet
// has to notice and stop publishing under the layout the broker leaves.
func (f *Follower) grace() bool {
	if f.graceUntil.IsZero() {
		f.graceUntil = time.Now().Add(agreement.HeartbeatsToExpire * f.cfg.Agreement.Heartbeat)
	}
	return !time.Now().Before(f.graceUntil)
}
