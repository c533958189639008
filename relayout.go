package shardcast

import (
	"errors"
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
)

// Errors of an online re-layout.
var (
	// ErrRelayoutInProgress is returned when a re-layout to another
	// layout is already under way for the application.
	ErrRelayoutInProgress = errors.New("shardcast: another re-layout is in progress")
	// ErrSameLayout is returned for a re-layout to the layout the record
	// already holds.
	ErrSameLayout = errors.New("shardcast: the new layout is the current one")
	// ErrRelayoutAborted is returned by a re-layout that was aborted (by
	// the caller, or because its context ended before the finish).
	ErrRelayoutAborted = errors.New("shardcast: re-layout aborted")
	// ErrRelayoutVanished is returned by a re-layout whose transition
	// disappeared from the control instance under its coordinator (the
	// instance lost its data): the brokers follow the record they find
	// (docs/RELAYOUT.md, "Failure cases"); check it before running again.
	ErrRelayoutVanished = errors.New("shardcast: the re-layout's transition vanished from the control instance")
	// ErrNoRelayout is returned by an abort when no re-layout is under
	// way for the application (it finished, was aborted, or never
	// began).
	ErrNoRelayout = errors.New("shardcast: no re-layout under way")
	// ErrNoLayoutRecord is returned when there is no layout record to
	// move from: no broker of the application ever ran with the
	// agreement on.
	ErrNoLayoutRecord = errors.New("shardcast: no layout record")
	// ErrRelayoutOrder is wrapped by the Err of an EventRelayout whose
	// channels' messages may have been delivered out of order at the
	// switch (never lost or twice).
	ErrRelayoutOrder = errors.New("shardcast: re-layout hand-over without its barrier; order at the switch not guaranteed")
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
