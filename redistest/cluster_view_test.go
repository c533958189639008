package redistest

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseClusterNodes(t *testing.T) {
	text := "" +
		"07c37dfeb235213a872192d90877d0cd55635b91 127.0.0.1:30004@31004,host-a slave e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 0 1426238317239 4 connected\n" +
		"67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1 127.0.0.1:30002@31002 master - 0 1426238316232 2 connected 5461-10922\n" +
		"292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f 127.0.0.1:30003@31003 master,fail - 0 1426238318243 3 disconnected 10923-16383 [10923->-67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1]\n" +
		"e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 127.0.0.1:30001@31001 myself,master - 0 0 1 connected 0 2-5460\n" +
		"6ec23923021cf3ffec47632106199cb7f496ce01 127.0.0.1:30005@31005 handshake - 0 0 0 connected\n"
	entries, err := parseClusterNodes(text)
	require.NoError(t, err)
	require.Len(t, entries, 5)

	replica := entries[0]
	assert.Equal(t, "127.0.0.1:30004", replica.addr)
	assert.Equal(t, "e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca", replica.masterID)
	assert.False(t, replica.isMaster())
	assert.True(t, replica.healthy())

	failed := entries[2]
	assert.True(t, failed.isMaster())
	assert.False(t, failed.healthy())
	assert.True(t, failed.migrating)
	assert.Equal(t, []SlotRange{{10923, 16383}}, failed.slots)

	me := entries[3]
	assert.Empty(t, me.masterID)
	assert.Equal(t, []SlotRange{{0, 0}, {2, 5460}}, me.slots)
	assert.False(t, me.migrating)

	assert.False(t, entries[4].healthy(), "a node in handshake is not a full member")

	for _, bad := range []string{"too few fields\n", "id 1.2.3.4:1@2 master - 0 0 1 connected 16384\n", "id a:1 master - 0 0 1 connected 9-3\n"} {
		_, err := parseClusterNodes(bad)
		assert.ErrorIs(t, err, ErrProtocol, bad)
	}
}

func TestParseClusterSlotsIsCanonical(t *testing.T) {
	node := func(port int64, id string) []any { return []any{"127.0.0.1", port, id, []any{}} }
	a := []any{
		[]any{int64(5461), int64(16383), node(2, "m2"), node(5, "r2b"), node(4, "r2a")},
		[]any{int64(0), int64(5460), node(1, "m1")},
	}
	b := []any{
		[]any{int64(0), int64(5460), node(1, "m1")},
		[]any{int64(5461), int64(16383), node(2, "m2"), node(4, "r2a"), node(5, "r2b")},
	}
	oa, err := parseClusterSlots(a)
	require.NoError(t, err)
	ob, err := parseClusterSlots(b)
	require.NoError(t, err)
	assert.Equal(t, slotMapKey(oa), slotMapKey(ob), "order of ranges and replicas must not matter")
	assert.Equal(t, "m2", ownerOf(oa, 16383))
	assert.Equal(t, "m1", ownerOf(oa, 0))
	assert.Equal(t, []string{"r2a", "r2b"}, oa[1].replicas)

	c := []any{[]any{int64(0), int64(5460), node(1, "m1"), node(9, "r1")}, b[1]}
	oc, err := parseClusterSlots(c)
	require.NoError(t, err)
	assert.NotEqual(t, slotMapKey(ob), slotMapKey(oc), "a replica more is a different map")

	for _, bad := range []any{"x", []any{[]any{int64(0)}}, []any{[]any{int64(9), int64(3), node(1, "m")}}, []any{[]any{int64(0), int64(1), "node"}}} {
		_, err := parseClusterSlots(bad)
		assert.ErrorIs(t, err, ErrProtocol)
	}
}

func TestRedisCLISlotSplit(t *testing.T) {
	assert.Equal(t, []SlotRange{{0, 16383}}, redisCLISlotSplit(1))
	assert.Equal(t, []SlotRange{{0, 5460}, {5461, 10922}, {10923, 16383}}, redisCLISlotSplit(3))
	// The 6-master split measured on a cluster built by redis-cli.
	assert.Equal(t, []SlotRange{{0, 2730}, {2731, 5460}, {5461, 8191}, {8192, 10922}, {10923, 13652}, {13653, 16383}},
		redisCLISlotSplit(6))
	for k := 1; k <= 200; k++ {
		split := redisCLISlotSplit(k)
		require.Len(t, split, k)
		next := 0
		for i, r := range split {
			require.Equal(t, next, int(r.First), "k=%d range %d must start where the last ended", k, i)
			require.LessOrEqual(t, r.First, r.Last)
			next = int(r.Last) + 1
			if k < 78 && i < k-1 {
				// redis-cli's float32 cursor matches exact arithmetic below 78 masters.
				want := int(math.Floor(float64(i+1)*SlotCount/float64(k)+0.5)) - 1
				require.Equal(t, want, int(r.Last), "k=%d range %d", k, i)
			}
		}
		require.Equal(t, SlotCount, next, "k=%d must cover every slot", k)
	}
	assert.Nil(t, redisCLISlotSplit(0))
}
