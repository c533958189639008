package sharded

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The stall tests stop a re-layout once every broker switched, so that
// publishers send the moving channels under the new layout while
// subscribers hold those messages back for barriers that cannot come
// yet, and keep it stopped well past the barrier timeout: the brokers
// must deliver what they hold and raise PhaseStalled. Then the re-layout
// is let go on, and must end cleanly.

// allSwitched waits until every broker of s's fleet completed the switch.
func (s *faultSetup) allSwitched() {
	waitFor(s.t, "every broker to switch", func() bool {
		for _, ev := range s.fleet.Events {
			if !slices.Contains(ev.RelayoutPhases(), shardcast.PhaseSwitch) {
				return false
			}
		}
		return true
	})
}

// assertDeliveringSince waits until every broker receives, on every
// channel, a message published after since, and that a broker reports
// the stall. Events reach their handler from the emitter's own goroutine,
// so the report may come after the deliveries and is waited for too.
func (s *faultSetup) assertDeliveringSince(since time.Time) {
	waitFor(s.t, "delivery of what was published after the re-layout stopped", func() bool {
		return s.fleet.Delivering(since)
	})
	waitFor(s.t, "a broker to report the stall", func() bool {
		return s.fleet.ReportedPhase(shardcast.PhaseStalled)
	})
}

// TestRelayoutControlDownAfterSwitch: the control instance (persistent)
// is killed once every broker switched, and stays down for several
// barrier timeouts; then it comes back and the re-layout finishes.
func TestRelayoutControlDownAfterSwitch(t *testing.T) {
	s := newFaultSetup(t, true, Config{}, redistest.WithArgs("--appendonly", "yes", "--appendfsync", "always"))
	_, err := s.relayout(func(p PhaseReport) {
		if p.Phase != shardcast.PhasePrepare {
			return
		}
		s.allSwitched()
		require.NoError(t, s.control.Kill())
		s.assertDeliveringSince(time.Now())
		require.NoError(t, s.control.Restart(context.Background()))
	})
	s.check(err)
}

// TestRelayoutStallOverflowsQueue: what the brokers held during the stall
// is handed over at once into a single worker's small queue, which
// overflows; the drop must be reported from when the held messages came,
// or their loss would lie outside every window.
func TestRelayoutStallOverflowsQueue(t *testing.T) {
	s := newFaultSetup(t, true, Config{Options: shardcast.Options{Workers: 1, QueueSize: 4}})
	_, err := s.relayout(func(p PhaseReport) {
		if p.Phase != shardcast.PhasePrepare {
			return
		}
		s.allSwitched()
		s.assertDeliveringSince(time.Now())
	})
	fig := s.check(err)
	assert.Positive(t, fig.LostReported, "no held message was dropped: the test did not overflow a queue")
}

// TestRelayoutCoordinatorSilentAfterSwitch: the coordinator stops
// calling once every broker switched (as if it had crashed), while the
// control instance stays up; then it carries on.
func TestRelayoutCoordinatorSilentAfterSwitch(t *testing.T) {
	s := newFaultSetup(t, true, Config{})
	_, err := s.relayout(func(p PhaseReport) {
		if p.Phase != shardcast.PhasePrepare {
			return
		}
		s.allSwitched()
		s.assertDeliveringSince(time.Now())
	})
	s.check(err)
}
