package shardcast

import (
	"time"
)

// Phases of an online re-layout, as the transition record in Redis names
// them and EventRelayout reports them (docs/RELAYOUT.md gives the
// protocol). A fleet goes prepare → switch → drain → finish, or from any
// phase before finish to abort.
const (
	// PhasePrepare: every live broker also subscribes its moving channels
	// under the new layout, and holds back what arrives there.
	PhasePrepare = "prepare"
	// PhaseSwitch: publishers send moving channels under the new layout;
	// a broker acknowledges once its publishes under the old one were
	// answered.
	PhaseSwitch = "switch"
	// PhaseDrain: the coordinator sends a barrier through every old
	// instance that loses channels; a subscriber that receives it has
	// every old message and delivers what it held back.
	PhaseDrain = "drain"
	// PhaseFinish: the record holds the new layout; brokers drop their
	// old subscriptions of the moving channels.
	PhaseFinish = "finish"
	// PhaseAbort: brokers return to the old layout.
	PhaseAbort = "abort"
	// PhaseBarrierTimeout and PhaseHandoverFull report a hand-over that
	// could not wait for the barrier (it did not come within the
	// broker's barrier timeout, or the hold-back buffer filled up): the
	// held messages were delivered at once.
	PhaseBarrierTimeout = "barrier_timeout"
	PhaseHandoverFull   = "handover_full"
	// PhaseStalled reports a re-layout that could not move on for the
	// broker's barrier timeout (its control instance unreachable, or its
	// coordinator silent) while the broker held messages back: it
	// delivered them at once and takes the new layout's messages directly
	// from then on; Channels are its moving channels, whose order it no
	// longer keeps in this re-layout.
	PhaseStalled = "stalled"
)

// RelayoutPhaseReport is one completed phase of a re-layout, as its
// coordinator saw it (sharded.Relayout, cluster.Relayout).
type RelayoutPhaseReport struct {
	// Phase is a Phase constant.
	Phase string
	// Took is how long the fleet took to acknowledge it.
	Took time.Duration
	// Brokers counts the live brokers that acknowledged.
	Brokers int
	// Barriers counts the barriers sent (PhaseDrain).
	Barriers int
}

// RelayoutReport is what a re-layout did.
type RelayoutReport struct {
	// ID names the re-layout.
	ID string
	// From and To are the layouts it moved between.
	From, To LayoutRecord
	// Phases lists the phases completed, in order.
	Phases []RelayoutPhaseReport
	// Aborted is set when the fleet returned to From.
	Aborted bool
}
