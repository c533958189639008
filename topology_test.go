package shardcast

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The replies below have the shapes rueidis' ToAny produced for Redis 7.0.15
// on a 3-master, 3-replica loopback cluster (node IDs and ports changed): RESP3 maps
// for node metadata and shards, RESP2 flat arrays where noted.

const (
	addrA, addrB, addrC = "127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003"
	addrA2, addrB2      = "127.0.0.1:7004", "127.0.0.1:7005"
	addrC2              = "127.0.0.1:7006"
)

// topoSlotsNode is one node of a CLUSTER SLOTS entry; meta is map[string]any{}
// (RESP3) or []any{} (RESP2).
func topoSlotsNode(port int64, id string, meta any) []any {
	return []any{"127.0.0.1", port, id, meta}
}

func topoSlotsEntry(start, end int64, nodes ...[]any) []any {
	e := []any{start, end}
	for _, n := range nodes {
		e = append(e, n)
	}
	return e
}

// topoHealthySlots is CLUSTER SLOTS of a healthy 3×1 cluster, in Redis' own
// (unsorted) order.
func topoHealthySlots(meta func() any) []any {
	return []any{
		topoSlotsEntry(5461, 10922, topoSlotsNode(7002, "idB", meta()), topoSlotsNode(7005, "idB2", meta())),
		topoSlotsEntry(0, 5460, topoSlotsNode(7001, "idA", meta()), topoSlotsNode(7004, "idA2", meta())),
		topoSlotsEntry(10923, 16383, topoSlotsNode(7003, "idC", meta()), topoSlotsNode(7006, "idC2", meta())),
	}
}

func topoMeta3() any { return map[string]any{} }
func topoMeta2() any { return []any{} }

var topoHealthy = SlotMap{Ranges: []SlotRange{
	{Start: 0, End: 5460, Master: addrA, MasterID: "idA", Replicas: []string{addrA2}},
	{Start: 5461, End: 10922, Master: addrB, MasterID: "idB", Replicas: []string{addrB2}},
	{Start: 10923, End: 16383, Master: addrC, MasterID: "idC", Replicas: []string{addrC2}},
}}

// topoShardNode3 is a CLUSTER SHARDS node as RESP3 delivers it.
func topoShardNode3(id string, port int64, role, health string) map[string]any {
	return map[string]any{"id": id, "port": port, "ip": "127.0.0.1", "endpoint": "127.0.0.1",
		"role": role, "replication-offset": int64(56), "health": health}
}

// topoShardNode2 is the same node as RESP2 delivers it: a flat key/value array.
func topoShardNode2(id string, port int64, role, health string) []any {
	return []any{"id", id, "port", port, "ip", "127.0.0.1", "endpoint", "127.0.0.1",
		"role", role, "replication-offset", int64(56), "health", health}
}

func topoShard3(slots []any, nodes ...map[string]any) map[string]any {
	ns := make([]any, len(nodes))
	for i, n := range nodes {
		ns[i] = n
	}
	return map[string]any{"slots": slots, "nodes": ns}
}

func TestParseClusterSlotsTopology(t *testing.T) {
	failedOver := topoHealthySlots(topoMeta3)
	// After SIGKILL of 7003 its replica 7006 serves the slots, with no replica.
	failedOver[2] = topoSlotsEntry(10923, 16383, topoSlotsNode(7006, "idC2", topoMeta3()))
	promoted := SlotMap{Ranges: append(topoHealthy.Ranges[:2:2],
		SlotRange{Start: 10923, End: 16383, Master: addrC2, MasterID: "idC2"})}

	tests := []struct {
		name    string
		reply   any
		queried string
		want    SlotMap
	}{
		{"healthy RESP3", topoHealthySlots(topoMeta3), "", topoHealthy},
		{"healthy RESP2", topoHealthySlots(topoMeta2), "", topoHealthy},
		{"failover shows promoted replica", failedOver, "", promoted},
		{
			// cluster-preferred-endpoint-type hostname: "?" for nodes with no
			// hostname, with the ip in the metadata.
			"hostname endpoints and ? fall back to ip",
			[]any{
				[]any{int64(0), int64(16383),
					[]any{"redis-a.local", int64(7001), "idA", map[string]any{"ip": "10.0.0.1"}},
					[]any{"?", int64(7004), "idA2", map[string]any{"ip": "10.0.0.4"}}},
			},
			"",
			SlotMap{Ranges: []SlotRange{{Start: 0, End: 16383, Master: "redis-a.local:7001", MasterID: "idA", Replicas: []string{"10.0.0.4:7004"}}}},
		},
		{
			// unknown-endpoint gives null; a node unsure of its ip gives "".
			"null and empty endpoints take the queried host",
			[]any{
				[]any{int64(0), int64(16383),
					[]any{nil, int64(7001), "idA", []any{"ip", "10.0.0.1"}},
					[]any{"", int64(7004), "idA2", []any{}}},
			},
			"redis.example:6379",
			SlotMap{Ranges: []SlotRange{{Start: 0, End: 16383, Master: "redis.example:7001", MasterID: "idA", Replicas: []string{"redis.example:7004"}}}},
		},
		{
			"legacy entries without id or metadata, []byte and int values",
			[]any{[]any{0, 16383, []any{[]byte("::1"), 7001}}},
			"",
			SlotMap{Ranges: []SlotRange{{Start: 0, End: 16383, Master: "[::1]:7001"}}},
		},
		{"empty cluster", []any{}, "", SlotMap{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseClusterSlotsFrom(tt.reply, tt.queried)
			require.NoError(t, err)
			assert.Equal(t, tt.want.String(), got.String())
			assert.True(t, tt.want.Equal(got), "got %+v", got)
		})
	}

	got, err := ParseClusterSlots(topoHealthySlots(topoMeta3))
	require.NoError(t, err)
	assert.True(t, topoHealthy.Equal(got))
	assert.True(t, got.Covered())
}

func TestParseClusterShardsTopology(t *testing.T) {
	healthy3 := []any{
		topoShard3([]any{int64(5461), int64(10922)}, topoShardNode3("idB", 7002, "master", "online"), topoShardNode3("idB2", 7005, "replica", "online")),
		topoShard3([]any{int64(10923), int64(16383)}, topoShardNode3("idC", 7003, "master", "online"), topoShardNode3("idC2", 7006, "replica", "online")),
		topoShard3([]any{int64(0), int64(5460)}, topoShardNode3("idA", 7001, "master", "online"), topoShardNode3("idA2", 7004, "replica", "online")),
	}
	healthy2 := []any{
		[]any{"slots", []any{int64(5461), int64(10922)}, "nodes", []any{topoShardNode2("idB", 7002, "master", "online"), topoShardNode2("idB2", 7005, "replica", "online")}},
		[]any{"slots", []any{int64(10923), int64(16383)}, "nodes", []any{topoShardNode2("idC", 7003, "master", "online"), topoShardNode2("idC2", 7006, "replica", "online")}},
		[]any{"slots", []any{int64(0), int64(5460)}, "nodes", []any{topoShardNode2("idA", 7001, "master", "online"), topoShardNode2("idA2", 7004, "replica", "online")}},
	}
	noReplicaC := SlotMap{Ranges: append(topoHealthy.Ranges[:2:2],
		SlotRange{Start: 10923, End: 16383, Master: addrC2, MasterID: "idC2"})}
	unownedC := SlotMap{Ranges: topoHealthy.Ranges[:2:2]}

	tests := []struct {
		name  string
		reply any
		want  SlotMap
	}{
		{"healthy RESP3", healthy3, topoHealthy},
		{"healthy RESP2", healthy2, topoHealthy},
		{
			// Redis 7.0 after failover: the dead master forms its own shard
			// with no slots, still listed as master/fail.
			"7.0 failover: dead master in its own empty shard",
			[]any{healthy3[0], healthy3[2],
				topoShard3([]any{}, topoShardNode3("idC", 7003, "master", "fail")),
				topoShard3([]any{int64(10923), int64(16383)}, topoShardNode3("idC2", 7006, "master", "online"))},
			noReplicaC,
		},
		{
			"failover: dead master and promoted one in the same shard, online wins",
			[]any{healthy3[0], healthy3[2],
				topoShard3([]any{int64(10923), int64(16383)}, topoShardNode3("idC", 7003, "master", "fail"), topoShardNode3("idC2", 7006, "master", "online"))},
			noReplicaC,
		},
		{
			"shard whose only master failed is unowned",
			[]any{healthy3[0], healthy3[2],
				topoShard3([]any{int64(10923), int64(16383)}, topoShardNode3("idC", 7003, "master", "fail"), topoShardNode3("idC2", 7006, "replica", "online"))},
			unownedC,
		},
		{
			"fresh replica in loading is not listed",
			[]any{healthy3[0], healthy3[2],
				topoShard3([]any{int64(10923), int64(16383)}, topoShardNode3("idC", 7003, "master", "online"), topoShardNode3("idC2", 7006, "replica", "loading"))},
			topoWithoutReplicas(topoHealthy, 2),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseClusterShards(tt.reply)
			require.NoError(t, err)
			assert.True(t, tt.want.Equal(got), "want %+v\n got %+v", tt.want, got)
		})
	}

	t.Run("hostname, ? and unknown endpoints", func(t *testing.T) {
		a := topoShardNode3("idA", 7001, "master", "online")
		a["endpoint"], a["hostname"] = "redis-a.local", "redis-a.local"
		r := topoShardNode3("idA2", 0, "replica", "online")
		r["endpoint"], r["ip"], r["tls-port"] = "?", "10.0.0.4", int64(8004)
		lb := topoShardNode3("idA3", 7007, "replica", "online")
		lb["endpoint"] = ""
		noRole := topoShardNode3("idX", 7009, "", "online")
		delete(noRole, "role")
		got, err := ParseClusterShardsFrom([]any{topoShard3([]any{int64(0), int64(16383)}, a, r, lb, noRole)}, "lb.example:6379")
		require.NoError(t, err)
		assert.Equal(t, []SlotRange{{Start: 0, End: 16383, Master: "redis-a.local:7001", MasterID: "idA",
			Replicas: []string{"10.0.0.4:8004", "lb.example:7007"}}}, got.Ranges)
	})
}

func topoWithoutReplicas(m SlotMap, i int) SlotMap {
	out := SlotMap{Ranges: append([]SlotRange(nil), m.Ranges...)}
	out.Ranges[i].Replicas = nil
	return out
}

func TestSlotMigrationTopology(t *testing.T) {
	// Slot 100 moves from A to B. While it is MIGRATING/IMPORTING, CLUSTER
	// SLOTS still shows it under A; after CLUSTER SETSLOT 100 NODE B it is a
	// range of its own.
	before, err := ParseClusterSlots(topoHealthySlots(topoMeta3))
	require.NoError(t, err)
	afterReply := topoHealthySlots(topoMeta3)
	a, b := afterReply[1].([]any), afterReply[0].([]any)
	afterReply = []any{
		topoSlotsEntry(0, 99, a[2].([]any), a[3].([]any)),
		topoSlotsEntry(100, 100, b[2].([]any), b[3].([]any)),
		topoSlotsEntry(101, 5460, a[2].([]any), a[3].([]any)),
		afterReply[0], afterReply[2],
	}
	after, err := ParseClusterSlots(afterReply)
	require.NoError(t, err)
	require.Len(t, after.Ranges, 5)
	assert.True(t, after.Covered())
	assert.False(t, before.Equal(after))

	// CLUSTER SHARDS lists the moved slot as an extra pair of B's shard.
	shards, err := ParseClusterShards([]any{
		topoShard3([]any{int64(0), int64(99), int64(101), int64(5460)}, topoShardNode3("idA", 7001, "master", "online"), topoShardNode3("idA2", 7004, "replica", "online")),
		topoShard3([]any{int64(100), int64(100), int64(5461), int64(10922)}, topoShardNode3("idB", 7002, "master", "online"), topoShardNode3("idB2", 7005, "replica", "online")),
		topoShard3([]any{int64(10923), int64(16383)}, topoShardNode3("idC", 7003, "master", "online"), topoShardNode3("idC2", 7006, "replica", "online")),
	})
	require.NoError(t, err)
	assert.True(t, after.Equal(shards), "SHARDS %v vs SLOTS %v", shards, after)

	for slot, want := range map[uint16][2]string{99: {addrA, addrA}, 100: {addrA, addrB}, 101: {addrA, addrA}} {
		got, ok := before.MasterOf(slot)
		assert.True(t, ok)
		assert.Equal(t, want[0], got, "before, slot %d", slot)
		got, _ = after.MasterOf(slot)
		assert.Equal(t, want[1], got, "after, slot %d", slot)
	}

	slots := []uint16{0, 100, 101, 5461, 16383}
	slotOf := func(p int) uint16 { return slots[p] }
	diff := DiffAssignments(Assign(slotOf, len(slots), before), Assign(slotOf, len(slots), after))
	assert.Equal(t, AssignmentDiff{Moved: []PartitionMove{{Partition: 1, From: addrA, To: addrB}}}, diff)
}

func TestNewSlotMapTopology(t *testing.T) {
	in := []SlotRange{
		{Start: 200, End: 16383, Master: addrB},
		{Start: 101, End: 199, Master: addrA, Replicas: []string{addrB2, addrA2, addrA2}},
		{Start: 0, End: 100, Master: addrA, Replicas: []string{addrA2, addrB2}},
	}
	m, err := NewSlotMap(in)
	require.NoError(t, err)
	assert.Equal(t, []SlotRange{
		{Start: 0, End: 199, Master: addrA, Replicas: []string{addrA2, addrB2}},
		{Start: 200, End: 16383, Master: addrB},
	}, m.Ranges, "sorted, replicas de-duplicated, adjacent identical ranges merged")
	assert.Equal(t, []string{addrB2, addrA2, addrA2}, in[1].Replicas, "input untouched")
	assert.True(t, m.Covered())

	for name, bad := range map[string][]SlotRange{
		"overlap":     {{Start: 0, End: 100, Master: addrA}, {Start: 100, End: 200, Master: addrB}},
		"past 16383":  {{Start: 16000, End: 16384, Master: addrA}},
		"end < start": {{Start: 10, End: 9, Master: addrA}},
		"no master":   {{Start: 0, End: 9}},
	} {
		_, err := NewSlotMap(bad)
		assert.ErrorIs(t, err, ErrBadTopology, name)
	}
}

func TestSlotMapQueriesTopology(t *testing.T) {
	m, err := NewSlotMap([]SlotRange{
		{Start: 0, End: 10, Master: addrA},
		{Start: 20, End: 16383, Master: addrB, Replicas: []string{addrB2, addrA2}},
		{Start: 11, End: 15, Master: addrA},
	})
	require.NoError(t, err)
	for slot, want := range map[uint16]string{0: addrA, 10: addrA, 11: addrA, 15: addrA, 16: "", 19: "", 20: addrB, 16383: addrB, 16384: "", 65535: ""} {
		got, ok := m.MasterOf(slot)
		assert.Equal(t, want != "", ok, "slot %d", slot)
		assert.Equal(t, want, got, "slot %d", slot)
	}
	assert.Equal(t, []string{addrA, addrB}, m.Masters())
	assert.False(t, m.Covered(), "slots 16-19 unowned")
	assert.False(t, SlotMap{}.Covered())
	assert.False(t, SlotMap{Ranges: []SlotRange{{Start: 0, End: 16383}}}.Covered(), "a range without a master")
	_, ok := SlotMap{}.MasterOf(0)
	assert.False(t, ok)

	same, err := NewSlotMap([]SlotRange{
		{Start: 0, End: 15, Master: addrA, Replicas: []string{}},
		{Start: 20, End: 16383, Master: addrB, Replicas: []string{addrA2, addrB2}},
	})
	require.NoError(t, err)
	assert.True(t, m.Equal(same), "merging and replica order do not matter")
	otherID := SlotMap{Ranges: append([]SlotRange(nil), same.Ranges...)}
	otherID.Ranges[0].MasterID = "new-node"
	assert.False(t, m.Equal(otherID), "a replaced node at the same address is a change")
	assert.True(t, SlotMap{}.Equal(SlotMap{Ranges: []SlotRange{}}))
}

func TestAssignTopology(t *testing.T) {
	// 128 partitions, partition p on slot 128·p, over the 3-master split.
	a := Assign(func(p int) uint16 { return uint16(p * 128) }, 128, topoHealthy)
	require.Len(t, a, 128)
	assert.Equal(t, map[string]int{addrA: 43, addrB: 43, addrC: 42}, a.Counts())
	assert.Equal(t, []string{addrA, addrB, addrC}, a.Masters())
	partsC := a.PartitionsOf(addrC)
	require.Len(t, partsC, 42)
	assert.Equal(t, 86, partsC[0])
	assert.Equal(t, 127, partsC[41])
	assert.Empty(t, a.PartitionsOf(""))
	assert.Empty(t, a.PartitionsOf("127.0.0.1:9999"))

	u := Assign(func(p int) uint16 { return uint16(p * 128) }, 128, SlotMap{Ranges: topoHealthy.Ranges[:2]})
	assert.Equal(t, partsC, u.PartitionsOf(""), "partitions of an unowned shard")
	assert.NotContains(t, u.Counts(), "")

	l, err := NewLayout(128, "")
	require.NoError(t, err)
	byLayout := AssignLayout(l, topoHealthy)
	require.Len(t, byLayout, 128)
	assert.Equal(t, Assign(l.Slot, 128, topoHealthy), byLayout)
	assert.Empty(t, AssignLayout(nil, topoHealthy))

	assert.Empty(t, Assign(nil, 4, topoHealthy))
	assert.Empty(t, Assign(func(int) uint16 { return 0 }, -1, topoHealthy))
	assert.Equal(t, Assignment{""}, Assign(func(int) uint16 { return 20000 }, 1, topoHealthy))
}

func TestDiffAssignmentsTopology(t *testing.T) {
	A, A2, B, C := addrA, addrA2, addrB, addrC
	tests := []struct {
		name          string
		before, after Assignment
		want          AssignmentDiff
	}{
		{"no change", Assignment{A, B, C}, Assignment{A, B, C}, AssignmentDiff{}},
		{"both empty", nil, Assignment{}, AssignmentDiff{}},
		{"partition moved", Assignment{A, B, C}, Assignment{A, C, C},
			AssignmentDiff{Moved: []PartitionMove{{1, B, C}}, RemovedMasters: []string{B}}},
		{"master added", Assignment{A, A, B, B}, Assignment{A, C, B, B},
			AssignmentDiff{Moved: []PartitionMove{{1, A, C}}, AddedMasters: []string{C}}},
		{"master removed, its partitions unowned", Assignment{A, B, C, C}, Assignment{A, B, "", ""},
			AssignmentDiff{Moved: []PartitionMove{{2, C, ""}, {3, C, ""}}, RemovedMasters: []string{C}}},
		{"replica promoted: every partition of A moves to A'", Assignment{A, B, A, C, A}, Assignment{A2, B, A2, C, A2},
			AssignmentDiff{Moved: []PartitionMove{{0, A, A2}, {2, A, A2}, {4, A, A2}}, AddedMasters: []string{A2}, RemovedMasters: []string{A}}},
		{"owner restored", Assignment{"", B}, Assignment{A, B},
			AssignmentDiff{Moved: []PartitionMove{{0, "", A}}, AddedMasters: []string{A}}},
		{"longer after: extra partitions move from unowned", Assignment{A}, Assignment{A, B, ""},
			AssignmentDiff{Moved: []PartitionMove{{1, "", B}}, AddedMasters: []string{B}}},
		{"shorter after: extra partitions move to unowned", Assignment{A, B}, Assignment{A},
			AssignmentDiff{Moved: []PartitionMove{{1, B, ""}}, RemovedMasters: []string{B}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := DiffAssignments(tt.before, tt.after)
			assert.Equal(t, tt.want, got)
			assert.Equal(t, len(tt.want.Moved) == 0, got.Empty())
		})
	}
}

func TestTopologyMalformedReplies(t *testing.T) {
	redisErr := errors.New("CLUSTERDOWN The cluster is down")
	node := func() []any { return topoSlotsNode(7001, "idA", map[string]any{}) }
	slotsCases := map[string]struct {
		reply any
		hint  string
	}{
		"nil":                {nil, "got nil"},
		"redis error":        {redisErr, "CLUSTERDOWN"},
		"not an array":       {"ERR", "want array"},
		"entry not an array": {[]any{int64(1)}, "entry 0"},
		"short entry":        {[]any{[]any{int64(0), int64(5)}}, "at least 3"},
		"string slot":        {[]any{[]any{"x", int64(5), node()}}, "start slot"},
		"negative slot":      {[]any{[]any{int64(-1), int64(5), node()}}, "out of range"},
		"slot 16384":         {[]any{[]any{int64(0), int64(16384), node()}}, "out of range"},
		"reversed range":     {[]any{[]any{int64(9), int64(5), node()}}, "ends before"},
		"short node":         {[]any{[]any{int64(0), int64(5), []any{"127.0.0.1"}}}, "at least 2"},
		"bad port":           {[]any{[]any{int64(0), int64(5), []any{"h", int64(70000)}}}, "port 70000"},
		"port is error":      {[]any{[]any{int64(0), int64(5), []any{"h", redisErr}}}, "CLUSTERDOWN"},
		"id not a string":    {[]any{[]any{int64(0), int64(5), []any{"h", int64(1), int64(2)}}}, "node id"},
		"odd metadata":       {[]any{[]any{int64(0), int64(5), []any{"h", int64(1), "id", []any{"ip"}}}}, "odd length"},
		"? without ip":       {[]any{[]any{int64(0), int64(5), []any{"?", int64(1), "id", []any{}}}}, "no ip"},
		"no endpoint":        {[]any{[]any{int64(0), int64(5), []any{nil, int64(1), "id", []any{}}}}, "queried address is unknown"},
		"overlapping ranges": {[]any{topoSlotsEntry(0, 10, node()), topoSlotsEntry(10, 20, node())}, "overlap"},
		"bad replica":        {[]any{[]any{int64(0), int64(5), node(), int64(3)}}, "replica 0"},
	}
	for name, tt := range slotsCases {
		m, err := ParseClusterSlots(tt.reply)
		require.ErrorIs(t, err, ErrBadTopology, name)
		assert.ErrorContains(t, err, tt.hint, name)
		assert.Empty(t, m.Ranges, name)
	}
	_, err := ParseClusterSlots([]any{[]any{int64(0), int64(5), []any{"h", redisErr}}})
	assert.ErrorIs(t, err, redisErr, "a Redis error inside the reply stays reachable")

	online := func() map[string]any { return topoShardNode3("idA", 7001, "master", "online") }
	shardsCases := map[string]struct {
		reply any
		hint  string
	}{
		"nil":               {nil, "got nil"},
		"redis error":       {redisErr, "CLUSTERDOWN"},
		"shard not a map":   {[]any{int64(3)}, "want map"},
		"odd flat shard":    {[]any{[]any{"slots"}}, "odd length"},
		"non-string key":    {[]any{[]any{int64(1), int64(2)}}, "key 0"},
		"no slots":          {[]any{map[string]any{"nodes": []any{}}}, `no "slots"`},
		"no nodes":          {[]any{map[string]any{"slots": []any{}}}, `no "nodes"`},
		"odd slots":         {[]any{topoShard3([]any{int64(0)}, online())}, "pairs"},
		"slot out of range": {[]any{topoShard3([]any{int64(0), int64(16384)}, online())}, "out of range"},
		"bad slot type":     {[]any{topoShard3([]any{int64(0), 1.5}, online())}, "got float64"},
		"role not a string": {[]any{topoShard3([]any{int64(0), int64(1)}, map[string]any{"role": int64(1)})}, "role"},
		"master bad port":   {[]any{topoShard3([]any{int64(0), int64(1)}, map[string]any{"role": "master", "health": "online", "port": "x"})}, "port"},
		"two online masters": {[]any{topoShard3([]any{int64(0), int64(1)}, online(), topoShardNode3("idX", 7009, "master", "online"))},
			"two online masters"},
		"overlapping shards": {[]any{topoShard3([]any{int64(0), int64(10)}, online()),
			topoShard3([]any{int64(5), int64(20)}, topoShardNode3("idB", 7002, "master", "online"))}, "overlap"},
		"bad slots in unowned shard": {[]any{topoShard3([]any{int64(-5), int64(1)}, topoShardNode3("idX", 7009, "master", "fail"))}, "out of range"},
	}
	for name, tt := range shardsCases {
		m, err := ParseClusterShards(tt.reply)
		require.ErrorIs(t, err, ErrBadTopology, name)
		assert.ErrorContains(t, err, tt.hint, name)
		assert.Empty(t, m.Ranges, name)
	}
}

// TestTopologyParsersSurviveJunk feeds random nested values, and valid
// replies with random parts replaced, to both parsers: they must never
// panic, and whatever they accept must satisfy the SlotMap invariants.
func TestTopologyParsersSurviveJunk(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	valid := []any{topoHealthySlots(topoMeta3), topoHealthySlots(topoMeta2)}
	validShards := []any{
		[]any{topoShard3([]any{int64(0), int64(16383)}, topoShardNode3("idA", 7001, "master", "online"), topoShardNode3("idA2", 7004, "replica", "online"))},
		[]any{[]any{"slots", []any{int64(0), int64(16383)}, "nodes", []any{topoShardNode2("idA", 7001, "master", "online")}}},
	}
	accepted := 0
	for i := range 5000 {
		var reply any
		switch i % 3 {
		case 0:
			reply = topoJunk(rng, 4)
		case 1:
			reply = topoMutate(rng, topoDeepCopy(valid[rng.IntN(len(valid))]))
		default:
			reply = topoMutate(rng, topoDeepCopy(validShards[rng.IntN(len(validShards))]))
		}
		for _, parse := range []func(any) (SlotMap, error){ParseClusterSlots, ParseClusterShards} {
			m, err := parse(reply)
			if err != nil {
				require.ErrorIs(t, err, ErrBadTopology)
				continue
			}
			accepted++
			for j, r := range m.Ranges {
				require.NotEmpty(t, r.Master)
				require.LessOrEqual(t, r.Start, r.End)
				require.Less(t, int(r.End), topoSlotCount)
				if j > 0 {
					require.Greater(t, r.Start, m.Ranges[j-1].End, "sorted and disjoint")
				}
			}
		}
	}
	assert.Positive(t, accepted, "some mutated replies stay valid, so the invariant checks ran")
}

func topoJunk(rng *rand.Rand, depth int) any {
	n := 9
	if depth == 0 {
		n = 7
	}
	switch rng.IntN(n) {
	case 0:
		return nil
	case 1:
		return rng.Int64N(40000) - 20000
	case 2:
		return rng.IntN(20000)
	case 3:
		return []string{"", "?", "master", "online", "slots", "nodes", "port", "127.0.0.1"}[rng.IntN(8)]
	case 4:
		return []byte("7001")
	case 5:
		return errors.New("ERR junk")
	case 6:
		return 1.5
	case 7:
		l := make([]any, rng.IntN(6))
		for i := range l {
			l[i] = topoJunk(rng, depth-1)
		}
		return l
	default:
		m := map[string]any{}
		for _, k := range []string{"slots", "nodes", "role", "health", "port", "endpoint", "ip"} {
			if rng.IntN(2) == 0 {
				m[k] = topoJunk(rng, depth-1)
			}
		}
		return m
	}
}

// topoMutate replaces one randomly chosen element somewhere inside v.
func topoMutate(rng *rand.Rand, v any) any {
	switch x := v.(type) {
	case []any:
		if len(x) == 0 || rng.IntN(4) == 0 {
			return topoJunk(rng, 2)
		}
		i := rng.IntN(len(x))
		x[i] = topoMutate(rng, x[i])
		return x
	case map[string]any:
		if len(x) == 0 {
			return topoJunk(rng, 2)
		}
		keys := slices.Sorted(maps.Keys(x)) // sorted so that a seed replays
		k := keys[rng.IntN(len(keys))]
		x[k] = topoMutate(rng, x[k])
		return x
	default:
		if rng.IntN(2) == 0 {
			return v
		}
		return topoJunk(rng, 1)
	}
}

func topoDeepCopy(v any) any {
	switch x := v.(type) {
	case []any:
		out := make([]any, len(x))
		for i := range x {
			out[i] = topoDeepCopy(x[i])
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = topoDeepCopy(e)
		}
		return out
	}
	return v
}

func ExampleParseClusterSlotsFrom() {
	reply := []any{ // CLUSTER SLOTS through rueidis' ToAny
		[]any{int64(5461), int64(16383), []any{"10.0.0.2", int64(6379), "id2", map[string]any{}}},
		[]any{int64(0), int64(5460), []any{"", int64(6379), "id1", map[string]any{}}},
	}
	m, err := ParseClusterSlotsFrom(reply, "10.0.0.1:6379")
	if err != nil {
		fmt.Println(err)
		return
	}
	a := Assign(func(p int) uint16 { return uint16(p * 4096) }, 4, m)
	fmt.Println(m, m.Covered(), a.Counts())
	// Output: 0-5460=10.0.0.1:6379 5461-16383=10.0.0.2:6379 true map[10.0.0.1:6379:2 10.0.0.2:6379:2]
}
