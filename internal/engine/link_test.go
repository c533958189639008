package engine

import (
	"testing"

	"github.com/shardcast/shardcast/internal/redistest"
	"github.com/shardcast/shardcast/internal/subconn"
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
