package engine

import (
	"sync"
	"testing"
	"time"

	"github.com/shardcast/shardcast/internal/subconn"
	"github.com/shardcast/shardcast/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestStoppedLinkReportsItsPaths: a path still active on the wire of a
// link the engine stops is reported interrupted as the wire closes, and
// restored on the link that carries it now. That happens when a
// resubscribe on the link's node is confirmed after the topology change
// that moved the path away interrupted it (a failed-over master restarted
// at once claims its old slots for a moment, and confirms): before, the
// path was healed on its new link without any report, and what its new
// node got meanwhile was lost silently (cluster TestRelayoutRedisFaults
// saw 1 to 11 such messages in about one run in six).
func TestStoppedLinkReportsItsPaths(t *testing.T) {
	srv := redistest.StartStandalone(t)
	m := newMovingRig(t, srv, subconn.Dialer{Addr: srv.Addr()}, subconn.Dialer{Addr: srv.Addr()})
	c, r := m.c, m.r

	r.moveTo(1) // the move's interruption came before the path was active on link 0
	r.links[0].Stop()
	select {
	case ev := <-m.interrupted:
		assert.Equal(t, []string{"ch"}, ev.Channels)
		assert.ErrorIs(t, ev.Err, errLinkStopped)
		assert.Equal(t, srv.Addr(), ev.Shard)
	case <-m.ctx.Done():
		t.Fatal("the path left on the stopped link's wire was not reported interrupted")
	}
	c.RequestRefresh()
	select {
	case <-m.restored:
	case <-m.ctx.Done():
		t.Fatal("the path was not restored on its new link")
	}
	require.Equal(t, r.links[1].Current(), c.Paths[0].ActiveWire())
	m.publish(t, "after")
	assert.Equal(t, "after", m.next(t))
	assert.Len(t, m.interrupted, 0, "one report")
}

// TestLinkDownNeverFalls: the outage clock counts open and closed
// outages, and never returns less than before, even when an outage ends
// "before" its start (a wall clock stepped back) or a reading races the
// end of an outage.
func TestLinkDownNeverFalls(t *testing.T) {
	var l Link
	assert.Zero(t, l.Down())
	now := time.Now()
	l.outageBegan(now.Add(-2 * time.Second))
	l.outageBegan(now) // already open: the first start stands
	open := l.Down()
	assert.GreaterOrEqual(t, open, 2*time.Second)
	l.outageEnded(now.Add(-3 * time.Second)) // the clock stepped back
	assert.GreaterOrEqual(t, l.Down(), open, "never less than before")
	l.outageBegan(time.Now().Add(-time.Second))
	l.outageEnded(time.Now())
	assert.GreaterOrEqual(t, l.Down(), open+time.Second-10*time.Millisecond, "a second outage adds up")

	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
				l.outageBegan(time.Now())
				l.outageEnded(time.Now())
			}
		}
	})
	last := l.Down()
	for range 10000 {
		d := l.Down()
		require.GreaterOrEqual(t, d, last)
		last = d
	}
	close(stop)
	wg.Wait()
}

// TestLinkConfirm: a reconnected link stays unconfirmed, and Sync
// subscribes nothing on it, until a confirmation from a question asked
// no earlier than the reconnect; a confirmation wakes the waiters.
func TestLinkConfirm(t *testing.T) {
	c := &Core{changed: make(chan struct{}), Paths: []*Path{newPath(0)}}
	l := &Link{c: c}
	reconnected := time.Now()
	l.unconfirmedAt.Store(reconnected.UnixNano())
	require.True(t, l.Unconfirmed())
	c.Sync(l, nil, []int{0}) // returns at once: nothing to dial or lock

	changed := c.changes()
	l.Confirm(reconnected.Add(-time.Millisecond)) // asked before the reconnect
	assert.True(t, l.Unconfirmed(), "a slot map asked for before the reconnect may predate a failover")
	l.Confirm(reconnected)
	assert.False(t, l.Unconfirmed())
	select {
	case <-changed:
	default:
		t.Error("the confirmation woke no waiter")
	}
	l.Confirm(time.Now()) // confirmed already: a no-op
}

// TestRelayedLinkDatesLossByItsRelay: on a node whose messages are relayed
// (a replica), a loss dates from the newest message the relay brought, not
// from a later PONG: what the master took before that PONG may still have
// been on its way. A node that is not relayed keeps the PONG's date, and
// the relay never dates a loss later than the last proof of health.
func TestRelayedLinkDatesLossByItsRelay(t *testing.T) {
	var l Link
	assert.True(t, l.LastHealthy().IsZero(), "never connected")
	connected := time.Now().Add(-3 * time.Second).Round(0) // wall clock only, as LastHealthy gives
	l.relayedAt.Store(connected.UnixNano())
	l.healthyAt.Store(connected.UnixNano())
	pong := connected.Add(2 * time.Second)
	l.healthyAt.Store(pong.UnixNano())
	assert.Equal(t, pong, l.LastHealthy(), "a master's PONG proves what came before it")

	l.Relayed.Store(true)
	assert.Equal(t, connected, l.LastHealthy(), "nothing relayed yet: from the connection")
	msg := connected.Add(time.Second)
	l.relayed(msg.UnixNano())
	l.relayed(connected.UnixNano()) // an older stamp, read later
	assert.Equal(t, msg, l.LastHealthy(), "from the newest message relayed")
	l.relayed(pong.Add(time.Second).UnixNano())
	assert.Equal(t, pong, l.LastHealthy(), "never later than the last PONG")
}
