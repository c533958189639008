package main

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/cluster"
	"github.com/shardcast/shardcast/redistest"
	"github.com/shardcast/shardcast/sharded"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testInspectRecordedLayout: on a cluster whose brokers run 256
// partitions with a prefix, inspect and key without -partitions use the
// recorded layout and say so; with flags that differ they keep the flags
// and warn; an application with no record gets the flags and a note.
func testInspectRecordedLayout(t *testing.T, seed string) {
	ctx := testCtx(t, 30*time.Second)
	const app = "clirecord:"
	fleet, err := cluster.New(cluster.Config{Addrs: []string{seed}, Partitions: 256, Prefix: "app:",
		Agreement: shardcast.Agreement{App: app}})
	require.NoError(t, err)
	defer func() { require.NoError(t, fleet.Close()) }()

	r := inspectJSON(t, ctx, "-cluster", seed, "-app", app)
	assert.Equal(t, 256, r.Partitions)
	assert.Equal(t, "app:", r.Prefix)
	assert.Equal(t, fleet.Fingerprint(), r.Fingerprint)
	assert.True(t, r.Record.Found)
	assert.Equal(t, "cluster", r.Record.Engine)
	assert.Equal(t, 1, r.Record.LiveBrokers)
	assert.Contains(t, r.LayoutNote, `layout from the record of app "clirecord:"; 1 live broker(s)`)

	r = inspectJSON(t, ctx, "-cluster", seed, "-app", app, "-partitions", "128")
	assert.Equal(t, 128, r.Partitions, "flags given win")
	assert.Contains(t, r.LayoutNote, "warning: layout from the flags, but the running brokers")
	assert.Contains(t, r.LayoutNote, fleet.Fingerprint())

	r = inspectJSON(t, ctx, "-cluster", seed, "-app", "nobody:")
	assert.Equal(t, 128, r.Partitions)
	assert.False(t, r.Record.Found)
	assert.Contains(t, r.LayoutNote, `no layout record for app "nobody:"`)

	text := mustRun(t, ctx, "inspect", "-sample", "10ms", "-cluster", seed, "-app", app)
	assert.Contains(t, text, "layout 256 partitions, prefix \"app:\"")
	assert.Contains(t, text, `layout from the record of app "clirecord:"`)

	res := runCmd(ctx, "", nil, "key", "-json", "-cluster", seed, "-app", app, "room:42")
	require.NoError(t, res.runErr, res.err)
	var keys []clusterKey
	require.NoError(t, json.Unmarshal([]byte(res.out), &keys), res.out)
	l, err := shardcast.NewLayout(256, "app:")
	require.NoError(t, err)
	p := l.Partition("room:42")
	require.Len(t, keys, 1)
	assert.Equal(t, p, keys[0].Partition)
	assert.Equal(t, l.PartitionKey(p, "room:42"), keys[0].Key)
	assert.Contains(t, res.err, "layout from the record")

	assert.ErrorContains(t, runCmd(ctx, "", nil, "inspect", "-cluster", seed, "-control", seed).runErr, "-control is for -shards")
	assert.ErrorIs(t, runCmd(ctx, "", nil, "key", "-cluster", seed, "-app", "{x}", "c").runErr, shardcast.ErrInvalidConfig)
}

// testInspectRecordedInstances: inspect and key -shards compare the list
// with the one the running brokers recorded on the control instance.
func testInspectRecordedInstances(t *testing.T, a, b *redistest.Server) {
	ctx := testCtx(t, 30*time.Second)
	const app = "clirecord:"
	fleet, err := sharded.New(sharded.Config{Addrs: []string{a.Addr(), b.Addr()}, Agreement: shardcast.Agreement{App: app}})
	require.NoError(t, err)
	defer func() { require.NoError(t, fleet.Close()) }()

	inspect := func(args ...string) shardsReport {
		t.Helper()
		var r shardsReport
		out := mustRun(t, ctx, append([]string{"inspect", "-json", "-sample", "10ms", "-app", app}, args...)...)
		require.NoError(t, json.Unmarshal([]byte(out), &r), out)
		return r
	}
	r := inspect("-shards", a.Addr()+","+b.Addr())
	assert.True(t, r.Record.Found)
	assert.Equal(t, []string{a.Addr(), b.Addr()}, r.Record.Instances)
	assert.Equal(t, fleet.Fingerprint(), r.Record.Fingerprint)
	assert.Contains(t, r.LayoutNote, `instance list as recorded for app "clirecord:"; 1 live broker(s)`)

	r = inspect("-shards", b.Addr()+","+a.Addr(), "-control", a.Addr())
	assert.Contains(t, r.LayoutNote, "warning: the running brokers of app \"clirecord:\" recorded another instance list, in routing order: "+a.Addr()+","+b.Addr())

	r = inspect("-shards", b.Addr()+","+a.Addr())
	assert.False(t, r.Record.Found, "the record is on the control instance, the first of the brokers' list")
	assert.Contains(t, r.LayoutNote, "no layout record for app \"clirecord:\" on "+b.Addr())

	res := runCmd(ctx, "", nil, "key", "-shards", b.Addr()+","+a.Addr(), "-control", a.Addr(), "-app", app, "room:1")
	require.NoError(t, res.runErr)
	assert.Contains(t, res.err, "warning: the running brokers")
	assert.Contains(t, res.out, "room:1")

	down := closedAddr(t)
	res = runCmd(ctx, "", nil, "key", "-shards", a.Addr()+","+b.Addr(), "-control", down, "-app", app, "room:1")
	require.NoError(t, res.runErr, "an unreadable record only warns")
	assert.Contains(t, res.err, "warning: layout record of app \"clirecord:\" unreadable")
}
