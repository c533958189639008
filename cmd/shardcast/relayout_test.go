package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/cluster"
	"github.com/shardcast/shardcast/redistest"
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

// TestRelayoutClusterCommand: `shardcast relayout -cluster` moves a
// running cluster broker from 128 to 1024 partitions and a new prefix and
// prints each phase; a second run to the same layout is refused as the
// current one, and one without a new layout says what is missing.
func TestRelayoutClusterCommand(t *testing.T) {
	c := redistest.StartCluster(t, 3, 0)
	br, err := cluster.New(cluster.Config{Addrs: c.Seeds(), Agreement: shardcast.Agreement{Heartbeat: 50 * time.Millisecond}})
	require.NoError(t, err)
	defer br.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	args := []string{"relayout", "-cluster", c.Seeds()[0], "-partitions", "1024", "-prefix", "v2:", "-heartbeat", "50ms"}
	require.NoError(t, run(ctx, args, stdio{out: &out, err: &errOut}), errOut.String())
	for _, phase := range []string{"prepare", "switch", "drain", "finish"} {
		assert.Contains(t, out.String(), "phase "+phase)
	}
	assert.Contains(t, out.String(), `cluster: 1024 partitions, prefix "v2:"`)
	want, err := shardcast.NewLayout(1024, "v2:")
	require.NoError(t, err)
	assert.Equal(t, want.Fingerprint(), br.Fingerprint())
	err = run(ctx, args, stdio{out: &out, err: &errOut})
	assert.ErrorIs(t, err, shardcast.ErrSameLayout)
	err = run(ctx, []string{"relayout", "-cluster", c.Seeds()[0]}, stdio{out: &out, err: &errOut})
	assert.ErrorContains(t, err, "give -partitions and/or -prefix")
}
