package engine

import (
	"context"
	"testing"
	"time"

	"github.com/shardcast/shardcast/internal/redistest"
	"github.com/shardcast/shardcast/internal/subconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestActivateRefusesVoidedConfirmations: a path is not activated on a
// wire that died, nor after a server-pushed unsubscribe arrived since the
// resubscribe began; either would hide a loss.
func TestActivateRefusesVoidedConfirmations(t *testing.T) {
	srv := redistest.StartStandalone(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wire, err := subconn.Open(ctx, subconn.Dialer{Addr: srv.Addr()}, subconn.Classic, subconn.Hooks{})
	require.NoError(t, err)
	defer wire.Close()

	p := newPath(7)
	p.add([]string{"a"}, 1)

	seq := p.lostSeq()
	_, _ = p.noteLost(nil, time.Now()) // a push raced the resubscribe
	_, ok := p.activateIf(wire, seq)
	assert.False(t, ok, "a push since the resubscribe began voids it")
	assert.Nil(t, p.ActiveWire())

	_, ok = p.activateIf(wire, p.lostSeq())
	require.True(t, ok)
	assert.Equal(t, wire, p.ActiveWire())
	chans, lost := p.interrupt(wire, time.Now())
	assert.True(t, lost)
	assert.Equal(t, []string{"a"}, chans)

	require.NoError(t, srv.Kill())
	select {
	case <-wire.Done():
	case <-ctx.Done():
		t.Fatal("wire did not die with its server")
	}
	_, ok = p.activateIf(wire, p.lostSeq())
	assert.False(t, ok, "a dead wire is never activated")
	assert.Nil(t, p.ActiveWire())
}
