package shardcast

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAssign(t *testing.T) {
	// 128 partitions, partition p on slot 128·p, over the 3-master split.
	a := topoHealthy.Assign(func(p int) uint16 { return uint16(p * 128) }, 128)
	require.Len(t, a, 128)
	assert.Len(t, a.PartitionsOf(addrA), 43)
	assert.Len(t, a.PartitionsOf(addrB), 43)
	assert.Equal(t, []string{addrA, addrB, addrC}, a.Masters())
	partsC := a.PartitionsOf(addrC)
	require.Len(t, partsC, 42)
	assert.Equal(t, 86, partsC[0])
	assert.Equal(t, 127, partsC[41])
	assert.Empty(t, a.PartitionsOf(""))
	assert.Empty(t, a.PartitionsOf("127.0.0.1:9999"))

	u := SlotMap{Ranges: topoHealthy.Ranges[:2]}.Assign(func(p int) uint16 { return uint16(p * 128) }, 128)
	assert.Equal(t, partsC, u.PartitionsOf(""), "partitions of an unowned shard")
	assert.Equal(t, []string{addrA, addrB}, u.Masters(), "unowned is not a master")

	l, err := NewLayout(128, "")
	require.NoError(t, err)
	byLayout := topoHealthy.Assign(l.Slot, l.Partitions())
	require.Len(t, byLayout, 128)
	for p, owner := range byLayout {
		want, _ := topoHealthy.MasterOf(l.Slot(p))
		require.Equal(t, want, owner, "partition %d", p)
	}

	assert.Empty(t, topoHealthy.Assign(nil, 4))
	assert.Empty(t, topoHealthy.Assign(func(int) uint16 { return 0 }, -1))
	assert.Equal(t, Assignment{""}, topoHealthy.Assign(func(int) uint16 { return 20000 }, 1))
}
