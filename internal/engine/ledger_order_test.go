package engine

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/subconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// raceAtFirst records c's events. When the first event of kind is decided
// and not yet queued, it starts race and gives it 200 ms to finish first:
// a ledger that orders window changes with their events makes race wait
// until that event is queued. The returned func waits for race and
// returns the events in the order they were queued.
func raceAtFirst(t *testing.T, c *Core, kind shardcast.EventKind, race func()) func() []shardcast.Event {
	var mu sync.Mutex
	var got []shardcast.Event
	started := false
	done := make(chan struct{})
	c.ledger.emit = func(ev shardcast.Event) {
		mu.Lock()
		first := ev.Kind == kind && !started
		started = started || first
		mu.Unlock()
		if first {
			go func() {
				defer close(done)
				race()
			}()
			select {
			case <-done:
			case <-time.After(200 * time.Millisecond):
			}
		}
		mu.Lock()
		got = append(got, ev)
		mu.Unlock()
	}
	return func() []shardcast.Event {
		t.Helper()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Fatalf("no %v event started the race, or the racing call never returned", kind)
		}
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(got)
	}
}

// interruptedPath returns a one-path Core whose path 0 wants "a", lost
// its wire at since and waits for a resubscribe, with the link that
// carries it holding a live wire to a real Redis.
func interruptedPath(t *testing.T, since time.Time) (*Core, *Path, *Link, *subconn.Conn) {
	_, wire, srv := pathWithWire(t, 0)
	c := onePathCore(t)
	l := c.NewLink(subconn.Dialer{Addr: srv.Addr()}, 0, func(*Link) func(string, []byte) { return nil }, nil)
	l.wire = wire
	c.SetRouter(&fanRouter{link: l})
	p := c.Paths[0]
	p.add([]string{"a"}, 1)
	p.activate(wire)
	_, lost := p.interrupt(wire, since)
	require.True(t, lost)
	return c, p, l, wire
}

// requireRestoredThenInterrupted checks that got is the Restored that
// closed the window opened at since, then the Interrupted of a later loss.
func requireRestoredThenInterrupted(t *testing.T, got []shardcast.Event, since time.Time) {
	t.Helper()
	require.Len(t, got, 2)
	assert.Equal(t, shardcast.EventRestored, got[0].Kind)
	assert.True(t, got[0].Since.Equal(since), "the Restored is dated from the loss it ends")
	assert.Equal(t, shardcast.EventInterrupted, got[1].Kind, "the later loss is reported after the Restored it follows")
	assert.Equal(t, []string{"a"}, got[1].Channels)
}

// requireInterruptedThenRestored checks that got is an Interrupted of
// channel "a", then the Restored that ends it, dated from it.
func requireInterruptedThenRestored(t *testing.T, got []shardcast.Event) {
	t.Helper()
	require.Len(t, got, 2)
	assert.Equal(t, shardcast.EventInterrupted, got[0].Kind)
	assert.Equal(t, []string{"a"}, got[0].Channels)
	assert.Equal(t, shardcast.EventRestored, got[1].Kind, "the Restored follows the Interrupted it ends")
	assert.True(t, got[1].Since.Equal(got[0].Since), "dated from the interruption it ends")
}

// TestLedgerOrdersRacingEvents: where a path's window closes (Sync,
// reactivate, a probe's restore, channels leaving an interrupted path) or
// opens (a lost wire, a failed command, a pushed unsubscribe), a racing
// change of the same window is reported after the first change's event,
// never before. Each case fails when its site does not hold the ledger's
// mu until its event is queued.
func TestLedgerOrdersRacingEvents(t *testing.T) {
	lostAgain := errors.New("health PING unanswered")

	// A channel unsubscribed while its path's interruption is being
	// reported is reported restored after that interruption. (A
	// re-layout's drop of moved channels once raced the health PING that
	// gave up the frozen instance they left: the Restored of the leaving
	// channels went out first, and the Interrupted after it named them
	// lost for good.)
	t.Run("unsubscribe racing an interruption", func(t *testing.T) {
		_, wire, _ := pathWithWire(t, 0)
		c := onePathCore(t)
		c.SetRouter(&fanRouter{}) // no link carries path 0
		p := c.Paths[0]
		p.add([]string{"a", "b"}, 1)
		p.activate(wire)
		var unsubErr error
		wait := raceAtFirst(t, c, shardcast.EventInterrupted, func() {
			unsubErr = c.unsubscribePath(context.Background(), p, []string{"a"}, 0)
		})
		c.interruptPath(p, wire, lostAgain)
		got := wait()
		require.NoError(t, unsubErr)
		require.Len(t, got, 2)
		assert.Equal(t, shardcast.EventInterrupted, got[0].Kind)
		assert.ElementsMatch(t, []string{"a", "b"}, got[0].Channels)
		assert.Equal(t, shardcast.EventRestored, got[1].Kind, "the leaving channel's Restored follows the Interrupted")
		assert.Equal(t, []string{"a"}, got[1].Channels)
		assert.Equal(t, got[0].Since, got[1].Since, "dated from the interruption it ends")
	})

	// A link's resubscribe restores the path, and the wire is lost again
	// before the Restored is queued.
	t.Run("sync restore racing an interruption", func(t *testing.T) {
		since := time.Now().Add(-time.Second)
		c, p, l, wire := interruptedPath(t, since)
		wait := raceAtFirst(t, c, shardcast.EventRestored, func() { l.interruptPaths(wire, time.Now(), lostAgain) })
		c.Sync(l, wire, []int{0})
		requireRestoredThenInterrupted(t, wait(), since)
		assert.Nil(t, p.ActiveWire(), "lost again")
	})

	// A Subscribe's resubscribe of an interrupted path restores it, and a
	// failed command interrupts it again before the Restored is queued.
	t.Run("reactivate racing an interruption", func(t *testing.T) {
		since := time.Now().Add(-time.Second)
		c, p, _, wire := interruptedPath(t, since)
		wait := raceAtFirst(t, c, shardcast.EventRestored, func() { c.interruptPath(p, wire, lostAgain) })
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, p.lock(ctx, c.closing))
		got, err := c.reactivate(ctx, p)
		p.unlock()
		require.NoError(t, err)
		assert.Equal(t, wire, got)
		requireRestoredThenInterrupted(t, wait(), since)
		assert.Nil(t, p.ActiveWire(), "lost again")
	})

	// A probe came back and ended the path's silent spell; the wire is
	// lost before the gathered Restored is queued.
	t.Run("probe restore racing an interruption", func(t *testing.T) {
		since := time.Now().Add(-time.Second)
		c, p, l, wire := interruptedPath(t, since)
		p.activate(wire)
		c.ledger.probeBack(l.Addr, p, since)
		wait := raceAtFirst(t, c, shardcast.EventRestored, func() { l.interruptPaths(wire, time.Now(), lostAgain) })
		c.ledger.reportProbed()
		requireRestoredThenInterrupted(t, wait(), since)
	})

	// The link loses its wire; before the Interrupted is queued, the
	// link's resubscribe of the path on a new wire is confirmed.
	t.Run("link loss racing a resubscribe", func(t *testing.T) {
		c, p, l, wire := interruptedPath(t, time.Now())
		p.activate(wire) // live again, no event: nothing was reported
		wait := raceAtFirst(t, c, shardcast.EventInterrupted, func() { c.Sync(l, wire, []int{0}) })
		l.interruptPaths(wire, time.Now(), lostAgain)
		requireInterruptedThenRestored(t, wait())
		assert.Equal(t, wire, p.ActiveWire(), "restored")
	})

	// A server-pushed unsubscribe interrupts the path; before the
	// Interrupted is queued, a Subscribe's resubscribe is confirmed.
	t.Run("pushed unsubscribe racing reactivate", func(t *testing.T) {
		c, p, l, wire := interruptedPath(t, time.Now())
		p.activate(wire)
		var reactivated error
		wait := raceAtFirst(t, c, shardcast.EventInterrupted, func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if reactivated = p.lock(ctx, c.closing); reactivated == nil {
				_, reactivated = c.reactivate(ctx, p)
				p.unlock()
			}
		})
		c.NoteLost(l, 0, errors.New("SUNSUBSCRIBE pushed: the slot moved"))
		requireInterruptedThenRestored(t, wait())
		require.NoError(t, reactivated)
		assert.Equal(t, wire, p.ActiveWire(), "restored")
	})
}
