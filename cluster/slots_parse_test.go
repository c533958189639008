package cluster

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardcast/shardcast"
)

const (
	addrA, addrB, addrC = "127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003"
	addrA2, addrB2      = "127.0.0.1:7004", "127.0.0.1:7005"
	addrC2              = "127.0.0.1:7006"
)

// topoHealthy is the SlotMap of a healthy 3-master, 3-replica cluster, as
// topoHealthySlots reports it.
var topoHealthy = shardcast.SlotMap{Ranges: []shardcast.SlotRange{
	{Start: 0, End: 5460, Master: addrA, MasterID: "idA", Replicas: []string{addrA2}},
	{Start: 5461, End: 10922, Master: addrB, MasterID: "idB", Replicas: []string{addrB2}},
	{Start: 10923, End: 16383, Master: addrC, MasterID: "idC", Replicas: []string{addrC2}},
}}

// The replies below have the shapes rueidis' ToAny produced for Redis 7.0.15
// on a 3-master, 3-replica loopback cluster (node IDs and ports changed):
// RESP3 maps for node metadata, RESP2 flat arrays where noted.

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

func TestParseClusterSlotsTopology(t *testing.T) {
	failedOver := topoHealthySlots(topoMeta3)
	// After SIGKILL of 7003 its replica 7006 serves the slots, with no replica.
	failedOver[2] = topoSlotsEntry(10923, 16383, topoSlotsNode(7006, "idC2", topoMeta3()))
	promoted := shardcast.SlotMap{Ranges: append(topoHealthy.Ranges[:2:2],
		shardcast.SlotRange{Start: 10923, End: 16383, Master: addrC2, MasterID: "idC2"})}

	tests := []struct {
		name    string
		reply   any
		queried string
		want    shardcast.SlotMap
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
			shardcast.SlotMap{Ranges: []shardcast.SlotRange{{Start: 0, End: 16383, Master: "redis-a.local:7001", MasterID: "idA", Replicas: []string{"10.0.0.4:7004"}}}},
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
			shardcast.SlotMap{Ranges: []shardcast.SlotRange{{Start: 0, End: 16383, Master: "redis.example:7001", MasterID: "idA", Replicas: []string{"redis.example:7004"}}}},
		},
		{
			"legacy entries without id or metadata, []byte and int values",
			[]any{[]any{0, 16383, []any{[]byte("::1"), 7001}}},
			"",
			shardcast.SlotMap{Ranges: []shardcast.SlotRange{{Start: 0, End: 16383, Master: "[::1]:7001"}}},
		},
		{"empty cluster", []any{}, "", shardcast.SlotMap{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseSlots(tt.reply, tt.queried)
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestSlotMigrationTopology(t *testing.T) {
	// Slot 100 moves from A to B. While it is MIGRATING/IMPORTING, CLUSTER
	// SLOTS still shows it under A; after CLUSTER SETSLOT 100 NODE B it is a
	// range of its own.
	before, err := ParseSlots(topoHealthySlots(topoMeta3), "")
	require.NoError(t, err)
	afterReply := topoHealthySlots(topoMeta3)
	a, b := afterReply[1].([]any), afterReply[0].([]any)
	afterReply = []any{
		topoSlotsEntry(0, 99, a[2].([]any), a[3].([]any)),
		topoSlotsEntry(100, 100, b[2].([]any), b[3].([]any)),
		topoSlotsEntry(101, 5460, a[2].([]any), a[3].([]any)),
		afterReply[0], afterReply[2],
	}
	after, err := ParseSlots(afterReply, "")
	require.NoError(t, err)
	require.Len(t, after.Ranges, 5)
	assert.NotEqual(t, before, after)

	for slot, want := range map[uint16][2]string{99: {addrA, addrA}, 100: {addrA, addrB}, 101: {addrA, addrA}} {
		got, ok := before.MasterOf(slot)
		assert.True(t, ok)
		assert.Equal(t, want[0], got, "before, slot %d", slot)
		got, _ = after.MasterOf(slot)
		assert.Equal(t, want[1], got, "after, slot %d", slot)
	}

	slots := []uint16{0, 100, 101, 5461, 16383}
	slotOf := func(p int) uint16 { return slots[p] }
	diff := movedPartitions(before.Assign(slotOf, len(slots)), after.Assign(slotOf, len(slots)))
	assert.Equal(t, []partitionMove{{Partition: 1, From: addrA, To: addrB}}, diff)
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
		m, err := ParseSlots(tt.reply, "")
		require.ErrorIs(t, err, shardcast.ErrBadTopology, name)
		assert.ErrorContains(t, err, tt.hint, name)
		assert.Empty(t, m.Ranges, name)
	}
	_, err := ParseSlots([]any{[]any{int64(0), int64(5), []any{"h", redisErr}}}, "")
	assert.ErrorIs(t, err, redisErr, "a Redis error inside the reply stays reachable")

}

// TestTopologyParserSurvivesJunk feeds random nested values, and valid
// replies with random parts replaced, to the parser: it must never panic,
// and whatever it accepts must satisfy the shardcast.SlotMap invariants.
func TestTopologyParserSurvivesJunk(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	valid := []any{topoHealthySlots(topoMeta3), topoHealthySlots(topoMeta2)}
	accepted := 0
	for i := range 5000 {
		reply := topoJunk(rng, 4)
		if i%2 == 1 {
			reply = topoMutate(rng, topoDeepCopy(valid[rng.IntN(len(valid))]))
		}
		for _, queried := range []string{"", "10.0.0.1:6379"} {
			m, err := ParseSlots(reply, queried)
			if err != nil {
				require.ErrorIs(t, err, shardcast.ErrBadTopology)
				continue
			}
			accepted++
			for j, r := range m.Ranges {
				require.NotEmpty(t, r.Master)
				require.LessOrEqual(t, r.Start, r.End)
				require.Less(t, int(r.End), maxSlot+1)
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

func ExampleParseSlots() {
	reply := []any{ // CLUSTER SLOTS through rueidis' ToAny
		[]any{int64(5461), int64(16383), []any{"10.0.0.2", int64(6379), "id2", map[string]any{}}},
		[]any{int64(0), int64(5460), []any{"", int64(6379), "id1", map[string]any{}}},
	}
	m, err := ParseSlots(reply, "10.0.0.1:6379")
	if err != nil {
		fmt.Println(err)
		return
	}
	a := m.Assign(func(p int) uint16 { return uint16(p * 4096) }, 4)
	for _, r := range m.Ranges {
		fmt.Printf("slots %d-%d: %s\n", r.Start, r.End, r.Master)
	}
	fmt.Println("partitions of 10.0.0.2:6379:", a.PartitionsOf("10.0.0.2:6379"))
	// Output:
	// slots 0-5460: 10.0.0.1:6379
	// slots 5461-16383: 10.0.0.2:6379
	// partitions of 10.0.0.2:6379: [2 3]
}
