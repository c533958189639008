package cluster

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shardcast/shardcast/internal/crc16"
	"github.com/shardcast/shardcast/internal/resp"
	"github.com/shardcast/shardcast/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The server-difference subtests of TestServerDiff (server_diff_test.go)
// about what a server is and which commands it has, rather than how its
// Pub/Sub behaves.

// testDiffIdentity: INFO server and HELLO name the server. Valkey reports
// the Redis version it is compatible with as redis_version (7.2.4 on every
// Valkey measured) and its own in valkey_version; from 8.1 it adds
// valkey_release_stage. HELLO's server and version fields are the real
// name and version everywhere. Valkey 9 runs Lua as a module named lua, and
// Redis 8 lists its built-in vectorset module; EVAL, which the engines
// need, answers on all.
func testDiffIdentity(t *testing.T, b redistest.ServerBuild, c *redistest.Cluster) {
	ctx := testCtx(t, 30*time.Second)
	node := c.Nodes()[0]
	info, err := node.Info(ctx, "server")
	require.NoError(t, err)
	stage, hasStage := info["valkey_release_stage"]
	if b.IsValkey() {
		assert.Equal(t, "7.2.4", info["redis_version"], "Valkey reports Redis 7.2.4 as redis_version")
		assert.Equal(t, "valkey", info["server_name"])
		assert.Equal(t, b.Version(), info["valkey_version"])
		if b.AtLeast(8, 1) {
			assert.Equal(t, "ga", stage, "Valkey 8.1+ reports valkey_release_stage")
		} else {
			assert.False(t, hasStage, "Valkey 8.0 has no valkey_release_stage, got %q", stage)
		}
	} else {
		assert.Equal(t, b.Version(), info["redis_version"])
		assert.NotContains(t, info, "server_name", "Redis has no server_name")
		assert.NotContains(t, info, "valkey_version")
		assert.False(t, hasStage)
	}

	v, err := node.Do(ctx, "HELLO", "2")
	require.NoError(t, err)
	hello := diffPairs(t, v)
	assert.Equal(t, strings.ToLower(b.Name), hello["server"], "HELLO server")
	assert.Equal(t, b.Version(), hello["version"], "HELLO version")
	assert.Equal(t, "cluster", hello["mode"])
	var modules []string
	list, ok := hello["modules"].([]any)
	require.True(t, ok, "HELLO modules: %#v", hello["modules"])
	for _, m := range list {
		modules = append(modules, fmt.Sprint(diffPairs(t, m)["name"]))
	}
	switch {
	case b.IsValkey() && b.Major >= 9:
		assert.Contains(t, modules, "lua", "Valkey 9 runs Lua scripting as a module")
	case !b.IsValkey() && b.Major >= 8:
		assert.Contains(t, modules, "vectorset", "Redis 8 lists its built-in vectorset module")
	default:
		assert.Empty(t, modules, "Redis 7 and Valkey 8 list no module")
	}
	got, err := node.Do(ctx, "EVAL", "return 1", "0")
	require.NoError(t, err, "EVAL, which the engines' scripts need")
	assert.Equal(t, int64(1), got)
}

// testDiffHashFieldExpiry: HEXPIRE, HPEXPIRE and HTTL (per-field hash
// expiry) exist on Redis 7.4+ and Valkey 9+; elsewhere they are unknown
// commands. Where they exist, a hash whose fields all expired is gone.
func testDiffHashFieldExpiry(t *testing.T, b redistest.ServerBuild, c *redistest.Cluster) {
	ctx := testCtx(t, 30*time.Second)
	const key = "{diff-hfe}h"
	master, _ := diffShard(t, ctx, c, key)
	_, err := master.Do(ctx, "HSET", key, "f", "1", "g", "2", "h", "3")
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = master.Do(context.Background(), "DEL", key) })
	supported := b.IsValkey() && b.Major >= 9 || !b.IsValkey() && b.AtLeast(7, 4)
	cmds := [][]string{
		{"HTTL", key, "FIELDS", "1", "h"},
		{"HEXPIRE", key, "100", "FIELDS", "1", "h"},
		{"HPEXPIRE", key, "1", "FIELDS", "3", "f", "g", "h"},
	}
	if !supported {
		for _, cmd := range cmds {
			_, err := master.Do(ctx, cmd...)
			require.Error(t, err, "%s: want an unknown command on %s %s (Redis < 7.4, Valkey < 9)", cmd[0], b.Name, b.Version())
			assert.Contains(t, diffServerMsg(err), "unknown command", cmd[0])
		}
		return
	}
	replies := make([]any, len(cmds))
	for i, cmd := range cmds {
		replies[i], err = master.Do(ctx, cmd...)
		require.NoError(t, err, "%s: want supported on Redis >= 7.4 and Valkey >= 9", cmd[0])
	}
	assert.Equal(t, []any{int64(-1)}, replies[0], "HTTL of a field without expiry")
	assert.Equal(t, []any{int64(1)}, replies[1], "HEXPIRE set")
	assert.Equal(t, []any{int64(1), int64(1), int64(1)}, replies[2], "HPEXPIRE set")
	var exists any
	assert.True(t, waitFor(10*time.Second, func() bool {
		exists, err = master.Do(ctx, "EXISTS", key)
		return err == nil && exists == int64(0)
	}), "a hash whose fields all expired is deleted (EXISTS %v, %v)", exists, err)
}

// testDiffSlotStats: CLUSTER SLOT-STATS answers on Valkey 8.0+ (and, by its
// release notes, Redis 8.2+), not on Redis 7.0 or 8.0. On Valkey it reports
// key-count only until cluster-slot-stats-enabled is set, then cpu-usec,
// network-bytes-in and network-bytes-out too: no Pub/Sub statistic, but
// SSUBSCRIBE and SPUBLISH count in the slot's network-bytes-in (the
// command) and network-bytes-out (the reply, and every smessage the node
// delivered).
func testDiffSlotStats(t *testing.T, b redistest.ServerBuild, c *redistest.Cluster) {
	ctx := testCtx(t, 30*time.Second)
	const ch = "{diff-stats}ch"
	master, _ := diffShard(t, ctx, c, ch)
	slot := strconv.Itoa(int(crc16.Slot(ch)))
	stats := func() map[string]any {
		v, err := master.Do(ctx, "CLUSTER", "SLOT-STATS", "SLOTSRANGE", slot, slot)
		require.NoError(t, err, "CLUSTER SLOT-STATS on %s %s", b.Name, b.Version())
		rows, ok := v.([]any)
		require.True(t, ok && len(rows) == 1, "one row: %#v", v)
		row, ok := rows[0].([]any)
		require.True(t, ok && len(row) == 2 && row[0] == int64(crc16.Slot(ch)), "row %#v", rows[0])
		return diffPairs(t, row[1])
	}
	switch {
	case !b.IsValkey() && !b.AtLeast(8, 2):
		_, err := master.Do(ctx, "CLUSTER", "SLOT-STATS", "SLOTSRANGE", slot, slot)
		require.Error(t, err, "want no CLUSTER SLOT-STATS on Redis < 8.2")
		assert.Contains(t, diffServerMsg(err), "unknown subcommand")
		return
	case !b.IsValkey():
		assert.Contains(t, stats(), "key-count", "Redis 8.2+ has CLUSTER SLOT-STATS (not measured here)")
		return
	}
	assert.Equal(t, []string{"key-count"}, diffSortedKeys(stats()), "Valkey's default: key-count only")
	_, err := master.Do(ctx, "CONFIG", "SET", "cluster-slot-stats-enabled", "yes")
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = master.Do(context.Background(), "CONFIG", "SET", "cluster-slot-stats-enabled", "no")
	})
	const subs, payload = 3, "0123456789abcdef"
	for range subs {
		diffSubscribe(t, ctx, master, false, ch) // counted in the slot too
	}
	before := stats()
	assert.Equal(t, []string{"cpu-usec", "key-count", "network-bytes-in", "network-bytes-out"}, diffSortedKeys(before),
		"no Pub/Sub statistic among them")
	n, err := master.Do(ctx, "SPUBLISH", ch, payload)
	require.NoError(t, err)
	require.Equal(t, int64(subs), n)
	after := stats()
	in := len(resp.AppendCommand(nil, "SPUBLISH", []string{ch, payload}))
	frame := len(fmt.Sprintf("*3\r\n$8\r\nsmessage\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n", len(ch), ch, len(payload), payload))
	reply := len(fmt.Sprintf(":%d\r\n", subs))
	grew := func(field string) int64 {
		a, okA := after[field].(int64)
		b, okB := before[field].(int64)
		require.True(t, okA && okB, "%s: %#v then %#v", field, before[field], after[field])
		return a - b
	}
	assert.Equal(t, int64(in), grew("network-bytes-in"), "the SPUBLISH command")
	assert.Equal(t, int64(reply+subs*frame), grew("network-bytes-out"), "the reply and %d smessage of %d bytes", subs, frame)
}

// testDiffCopyAvoidance: Valkey 9 queues a bulk reply of 16 KiB or more by
// reference (min-string-size-avoid-copy-reply) and charges only the
// reference to client-output-buffer-limit, so a subscriber's backlog of
// large messages no longer trips its limit; the other servers have no such
// setting. The output-buffer tests of cluster and bench/cmd/chaos allow for
// it.
func testDiffCopyAvoidance(t *testing.T, b redistest.ServerBuild, c *redistest.Cluster) {
	ctx := testCtx(t, 10*time.Second)
	v, err := c.Nodes()[0].Do(ctx, "CONFIG", "GET", "min-string-size-avoid-copy-reply")
	require.NoError(t, err)
	kv, _ := v.([]any)
	if b.IsValkey() && b.Major >= 9 {
		assert.Equal(t, []any{"min-string-size-avoid-copy-reply", "16384"}, kv, "Valkey 9 avoids copying replies of 16 KiB or more")
	} else {
		assert.Empty(t, kv, "no reply copy avoidance before Valkey 9")
	}
}

// testDiffClusterShards: CLUSTER SHARDS lists each shard's slots and nodes
// with the same node fields everywhere; Valkey 9 adds the shard's id. The
// engines read CLUSTER SLOTS, not this.
func testDiffClusterShards(t *testing.T, b redistest.ServerBuild, c *redistest.Cluster) {
	ctx := testCtx(t, 30*time.Second)
	v, err := c.Nodes()[0].Do(ctx, "CLUSTER", "SHARDS")
	require.NoError(t, err)
	shards, ok := v.([]any)
	require.True(t, ok && len(shards) == 3, "3 shards: %#v", v)
	want := []string{"nodes", "slots"}
	if b.IsValkey() && b.Major >= 9 {
		want = []string{"id", "nodes", "slots"}
	}
	for _, s := range shards {
		shard := diffPairs(t, s)
		assert.Equal(t, want, diffSortedKeys(shard), "shard fields (Valkey 9+ adds id)")
		nodes, ok := shard["nodes"].([]any)
		require.True(t, ok && len(nodes) == 2, "2 nodes: %#v", shard["nodes"])
		for _, n := range nodes {
			assert.Equal(t, []string{"endpoint", "health", "id", "ip", "port", "replication-offset", "role"}, diffSortedKeys(diffPairs(t, n)))
		}
	}
}
