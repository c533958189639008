package engine

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/subconn"
	"github.com/shardcast/shardcast/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// pathWithWire returns path id wanting channel "a", not active yet, and
// a live wire (closed when the test ends) to a real Redis, srv.
func pathWithWire(t *testing.T, id int) (p *Path, wire *subconn.Conn, srv *redistest.Server) {
	t.Helper()
	srv = redistest.StartStandalone(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wire, err := subconn.Open(ctx, subconn.Dialer{Addr: srv.Addr()}, subconn.Classic, subconn.Hooks{})
	require.NoError(t, err)
	t.Cleanup(wire.Close)
	p = newPath(id)
	p.add([]string{"a"}, 1)
	return p, wire, srv
}

// onePathCore returns a Core of one path, its messages raw and dropped,
// closed when the test ends.
func onePathCore(t *testing.T) *Core {
	c := NewCore(CoreConfig{
		Options: shardcast.Options{Raw: true, Handler: func(shardcast.Message) {}}.WithDefaults(),
		Conn:    shardcast.ConnOptions{}.WithDefaults(),
		Paths:   1,
		Mode:    subconn.Classic,
	})
	t.Cleanup(func() { c.Close(func() {}) })
	return c
}

// TestActivateRefusesVoidedConfirmations: a path is not activated on a
// wire that died, nor after a server-pushed unsubscribe arrived since the
// resubscribe began; either would hide a loss.
func TestActivateRefusesVoidedConfirmations(t *testing.T) {
	p, wire, srv := pathWithWire(t, 7)

	seq := p.lostSeq()
	_, _ = p.noteLost(nil, time.Now()) // a push raced the resubscribe
	_, ok := p.activateIf(wire, seq, false)
	assert.False(t, ok, "a push since the resubscribe began voids it")
	assert.Nil(t, p.ActiveWire())

	_, ok = p.activateIf(wire, p.lostSeq(), false)
	require.True(t, ok)
	assert.Equal(t, wire, p.ActiveWire())
	chans, lost := p.interrupt(wire, time.Now())
	assert.True(t, lost)
	assert.Equal(t, []string{"a"}, chans)

	require.NoError(t, srv.Kill())
	select {
	case <-wire.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("wire did not die with its server")
	}
	_, ok = p.activateIf(wire, p.lostSeq(), false)
	assert.False(t, ok, "a dead wire is never activated")
	assert.Nil(t, p.ActiveWire())
}

// TestInterruptedForNeverGoesBack: a path's interrupted total, read while
// interruptions end, never falls (a read racing the end of one missed it
// whole: an hour here, as a loss dated from a link's last proof of
// health can be).
func TestInterruptedForNeverGoesBack(t *testing.T) {
	p, wire, _ := pathWithWire(t, 1)
	p.activate(wire)

	var stop atomic.Bool
	var fell atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		var prev time.Duration
		for !stop.Load() {
			d := p.interruptedFor()
			if d < prev {
				fell.Store(int64(prev - d))
				return
			}
			prev = d
		}
	}()
	for range 20000 {
		p.interrupt(wire, time.Now().Add(-time.Hour))
		p.activate(wire)
	}
	stop.Store(true)
	<-done
	assert.Zero(t, time.Duration(fell.Load()), "the total fell")
	assert.GreaterOrEqual(t, p.interruptedFor(), 20000*time.Hour, "every interruption counted")
}

// TestRelayedRestoreWaitsForProbe: a path restored on a relayed wire (a
// cluster replica) is not reported restored by the subscribe's
// confirmation, which proves nothing of what its master relays to it, but
// stays in a silent spell dated from its interruption, which the next
// probe that comes back ends. Without probes, the confirmation restores it.
func TestRelayedRestoreWaitsForProbe(t *testing.T) {
	p, wire, _ := pathWithWire(t, 3)
	p.probe = &probeState{channel: "probe"}
	_, ok := p.activateIf(wire, p.lostSeq(), true)
	require.True(t, ok)
	assert.False(t, p.win.spell, "a first activation ends no interruption")

	down := time.Now().Add(-time.Second)
	_, lost := p.interrupt(wire, down)
	require.True(t, lost)
	since, ok := p.activateIf(wire, p.lostSeq(), true)
	require.True(t, ok)
	assert.True(t, since.IsZero(), "not restored by the confirmation")
	assert.True(t, p.win.spell)
	assert.Equal(t, down, p.win.spellSince, "the spell keeps the interruption's start")

	p.probe = nil
	_, _ = p.interrupt(wire, down)
	p.win.spell, p.win.spellSince = false, time.Time{}
	since, ok = p.activateIf(wire, p.lostSeq(), true)
	require.True(t, ok)
	assert.Equal(t, down, since, "without probes the confirmation restores it")
}

// TestRestoreCarriedIntoNextLoss: a spell a probe ended, on a path
// interrupted again before the gathered Restored went out, is not
// reported on its own; its start is carried into the next interruption,
// so the Restored that ends that one covers the spell too.
func TestRestoreCarriedIntoNextLoss(t *testing.T) {
	_, wire, _ := pathWithWire(t, 0)
	c := onePathCore(t)
	p := c.Paths[0]
	p.probe = &probeState{channel: "probe"}
	p.add([]string{"a"}, 1)
	_, ok := p.activateIf(wire, p.lostSeq(), false)
	require.True(t, ok)

	// A probe that comes back ends a spell begun at spell; the wire is
	// lost before the gathered Restored goes out.
	spell := time.Now().Add(-3 * time.Second)
	c.ledger.probeBack("a:1", p, spell)
	down := time.Now().Add(-time.Second)
	_, lost := p.interrupt(wire, down)
	require.True(t, lost)
	c.ledger.reportProbed()
	since, ok := p.activateIf(wire, p.lostSeq(), false)
	require.True(t, ok)
	assert.Equal(t, spell, since, "the next Restored runs from the spell's start")

	// Lost again while in a later spell: the spell keeps the earlier start.
	p.win.spell, p.win.spellSince = true, down
	p.carrySince(spell)
	assert.Equal(t, spell, p.win.spellSince)
	p.carrySince(time.Now())
	assert.Equal(t, spell, p.win.spellSince, "a later start changes nothing")
}
