package shardcast

import "time"

// LayoutStatus is what an application's layout record says at one
// moment: the layout its brokers route by, the brokers registered under
// it, and the online re-layout under way. sharded.ReadLayout and
// cluster.ReadLayout read it without changing anything, so that an
// operator's tool can show the layout a running fleet uses rather than
// the one its own flags name, and see a re-layout that is stuck.
type LayoutStatus struct {
	// Record is the recorded layout, nil when the application has no
	// record there: its brokers run with Agreement.Off or under another
	// App, or none has run since the record expired.
	Record *LayoutRecord
	// Brokers are the live brokers registered under the record, by
	// their registry ids (host name, process id and a random part),
	// sorted.
	Brokers []string
	// Relayout is the online re-layout under way, nil when none is.
	Relayout *RelayoutStatus
}

// RelayoutStatus is an online re-layout under way, as its coordinator
// recorded it next to the layout record (docs/RELAYOUT.md).
type RelayoutStatus struct {
	// ID names the re-layout (RelayoutReport.ID); Phase is the phase
	// the fleet is in, a Phase constant.
	ID, Phase string
	// To is the layout it moves to; the record still holds the old one
	// until PhaseFinish.
	To LayoutRecord
	// Coordinator names who runs it: "relayout:", the host name, "/"
	// and the process id.
	Coordinator string
	// StartedAt and PhaseAt are the server's times when it began and
	// when it entered Phase.
	StartedAt, PhaseAt time.Time
}
