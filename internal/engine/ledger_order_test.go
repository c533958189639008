package engine

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLedgerOrdersRacingEvents: a channel unsubscribed while its path's
// interruption is being reported is reported restored after that
// interruption, never before. (A re-layout's drop of moved channels once
// raced the health PING that gave up the frozen instance they left: the
// Restored of the leaving channels went out first, and the Interrupted
// after it named them lost for good.)
func TestLedgerOrdersRacingEvents(t *testing.T) {
	_, wire, _ := pathWithWire(t, 0)
	c := onePathCore(t)
	c.SetRouter(&fanRouter{}) // every channel on path 0, which no link carries
	p := c.Paths[0]
	p.add([]string{"a", "b"}, 1)
	p.activate(wire)

	var mu sync.Mutex
	var got []shardcast.Event
	unsubscribed := make(chan error, 1)
	c.ledger.emit = func(ev shardcast.Event) {
		if ev.Kind == shardcast.EventInterrupted {
			// The interruption is decided and not yet queued: an
			// Unsubscribe of one of its channels runs now. It cannot
			// finish before this event is queued; the bounded wait only
			// gives it the chance to go first.
			go func() { unsubscribed <- c.unsubscribePath(context.Background(), p, []string{"a"}, 0) }()
			select {
			case err := <-unsubscribed:
				unsubscribed <- err
			case <-time.After(200 * time.Millisecond):
			}
		}
		mu.Lock()
		got = append(got, ev)
		mu.Unlock()
	}
	c.interruptPath(p, wire, errors.New("health PING unanswered"))
	require.NoError(t, <-unsubscribed)

	mu.Lock()
	defer mu.Unlock()
	require.Len(t, got, 2)
	assert.Equal(t, shardcast.EventInterrupted, got[0].Kind)
	assert.ElementsMatch(t, []string{"a", "b"}, got[0].Channels)
	assert.Equal(t, shardcast.EventRestored, got[1].Kind, "the leaving channel's Restored follows the Interrupted")
	assert.Equal(t, []string{"a"}, got[1].Channels)
	assert.Equal(t, got[0].Since, got[1].Since, "dated from the interruption it ends")
}
