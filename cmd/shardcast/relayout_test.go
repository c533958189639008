package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/redistest"
	"github.com/shardcast/shardcast/sharded"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRelayoutCommand: `shardcast relayout` moves a running sharded
// broker from 2 to 3 instances and prints each phase; a second run to the
// same list is refused as the current layout.
func TestRelayoutCommand(t *testing.T) {
	a, b, c := redistest.StartStandalone(t), redistest.StartStandalone(t), redistest.StartStandalone(t)
	hb := shardcast.Agreement{Heartbeat: 50 * time.Millisecond}
	br, err := sharded.New(sharded.Config{Addrs: []string{a.Addr(), b.Addr()}, Agreement: hb})
	require.NoError(t, err)
	defer br.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	shards := a.Addr() + "," + b.Addr() + "," + c.Addr()
	var out, errOut bytes.Buffer
	args := []string{"relayout", "-shards", shards, "-control", a.Addr(), "-heartbeat", "50ms"}
	require.NoError(t, run(ctx, args, stdio{out: &out, err: &errOut}), errOut.String())
	for _, phase := range []string{"prepare", "switch", "drain", "finish"} {
		assert.Contains(t, out.String(), "phase "+phase)
	}
	assert.Contains(t, out.String(), "3 instances")
	want, err := sharded.Fingerprint([]string{a.Addr(), b.Addr(), c.Addr()})
	require.NoError(t, err)
	assert.Equal(t, want, br.Fingerprint())
	err = run(ctx, args, stdio{out: &out, err: &errOut})
	assert.ErrorIs(t, err, shardcast.ErrSameLayout)
}
