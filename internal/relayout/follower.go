// Package relayout holds the parts of the online re-layout protocol
// (docs/RELAYOUT.md) that do not depend on the engine: the follower that
// takes a broker through the phases, the hand-over buffer, the gate that
// keeps Subscribe calls out while the routing changes, and the
// coordinator's phase stepping. An engine supplies how it routes, through
// the Engine interface.
package relayout

import (
	"context"
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
	// layout; it returns how many channels it subscribed twice. It is
	// called again after a failure, and must then keep what it did.
	Prepare(ctx context.Context, t *agreement.Transition) (moving int, err error)
	// Route publishes moving channels under the new layout (switched) or
	// the old one, and returns once every publish of a moving channel
	// sent under the previous routing was answered.
	Route(ctx context.Context, switched bool) error
	// Switched reports whether moving channels are published under the
	// new layout.
	Switched() bool
	// Finish makes the new layout (to) the broker's and drops the
	// subscriptions only the old one needed.
	Finish(ctx context.Context, to shardcast.LayoutRecord) error
	// Revert returns to the old layout alone after an abort ended and
	// drops the subscriptions only the new one needed.
	Revert(ctx context.Context) error
	// NextFingerprint is the fingerprint of the layout the re-layout
	// under way moves to, "" when none is.
	NextFingerprint() string
}

// FollowerConfig is what NewFollower needs.
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
	// since dates the current stage, for the events; drainAt is when the
	// broker began to wait for its barriers.
	since, drainAt time.Time
	moving         int
}

const (
	stageNone = iota
	stagePrepared
	stageSwitched
	stageDrained
	stageFinished
	stageAborted
)

// NewFollower returns a follower; nil when cfg.Member is nil (the
// agreement is off).
func NewFollower(cfg FollowerConfig) *Follower {
	if cfg.Member == nil {
		return nil
	}
	if cfg.BarrierTimeout == 0 {
		cfg.BarrierTimeout = max(2*time.Second, shardcast.HeartbeatsToExpire*cfg.Agreement.Heartbeat)
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
	}
	n, err := f.cfg.Engine.Prepare(ctx, t)
	if err != nil {
		f.cfg.Core.Log.Warn("shardcast: re-layout prepare failed; retrying", "err", err)
		return false
	}
	f.id, f.to, f.moving = t.ID, t.ToRecord, n
	f.stage = stagePrepared
	f.emit(shardcast.PhasePrepare, nil)
	return true
}

// switchOver publishes moving channels under the new layout from now on,
// once every publish under the old one was answered.
func (f *Follower) switchOver(ctx context.Context) bool {
	if f.stage >= stageSwitched {
		return true
	}
	if !f.cfg.Engine.Switched() && f.cfg.Engine.Route(ctx, true) != nil {
		return false
	}
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
	if f.cfg.Engine.Switched() && f.cfg.Engine.Route(ctx, false) != nil {
		return false
	}
	f.cfg.Hand.Force(shardcast.PhaseAbort)
	f.stage = stageAborted
	f.emit(shardcast.PhaseAbort, nil)
	return true
}

// ended cleans up after a re-layout that ended: finished (the record holds
// its layout: finish now if the broker did not) or aborted.
func (f *Follower) ended(ctx context.Context) {
	if f.stage != stageFinished {
		st, err := agreement.Read(ctx, f.cfg.Run, f.cfg.Agreement)
		if err != nil {
			return
		}
		if st.Record != nil && st.Record.Fingerprint == f.cfg.Engine.NextFingerprint() && f.stage != stageAborted {
			if !f.finish(ctx) {
				return
			}
		} else {
			f.cfg.Hand.Force(shardcast.PhaseAbort)
			if err := f.cfg.Engine.Revert(ctx); err != nil {
				f.cfg.Core.Log.Warn("shardcast: re-layout: returning to the old layout failed; retrying", "err", err)
				return
			}
		}
	}
	f.id, f.stage, f.moving = "", stageNone, 0
}
