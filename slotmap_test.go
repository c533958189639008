package shardcast

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	addrA, addrB, addrC = "127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003"
	addrA2, addrB2      = "127.0.0.1:7004", "127.0.0.1:7005"
	addrC2              = "127.0.0.1:7006"
)

// topoHealthy is the SlotMap of a healthy 3-master, 3-replica cluster.
var topoHealthy = SlotMap{Ranges: []SlotRange{
	{Start: 0, End: 5460, Master: addrA, MasterID: "idA", Replicas: []string{addrA2}},
	{Start: 5461, End: 10922, Master: addrB, MasterID: "idB", Replicas: []string{addrB2}},
	{Start: 10923, End: 16383, Master: addrC, MasterID: "idC", Replicas: []string{addrC2}},
}}

func TestNewSlotMapNormalises(t *testing.T) {
	in := []SlotRange{
		{Start: 200, End: 16383, Master: addrB, Replicas: []string{}},
		{Start: 101, End: 199, Master: addrA, Replicas: []string{addrB2, addrA2, addrA2}},
		{Start: 0, End: 100, Master: addrA, Replicas: []string{addrA2, addrB2}},
	}
	m, err := NewSlotMap(in)
	require.NoError(t, err)
	assert.Equal(t, []SlotRange{
		{Start: 0, End: 199, Master: addrA, Replicas: []string{addrA2, addrB2}},
		{Start: 200, End: 16383, Master: addrB},
	}, m.Ranges, "sorted, replicas de-duplicated, empty replicas nil, adjacent identical ranges merged")
	assert.Equal(t, []string{addrB2, addrA2, addrA2}, in[1].Replicas, "input untouched")

	split := []SlotRange{
		{Start: 0, End: 10, Master: addrA, MasterID: "idA"},
		{Start: 11, End: 20, Master: addrA, MasterID: "idA2"},
	}
	m, err = NewSlotMap(split)
	require.NoError(t, err)
	assert.Len(t, m.Ranges, 2, "a replaced node at the same address keeps its own range")

	empty, err := NewSlotMap(nil)
	require.NoError(t, err)
	assert.Equal(t, SlotMap{}, empty)
}

func TestNewSlotMapRejects(t *testing.T) {
	for name, bad := range map[string][]SlotRange{
		"overlap":     {{Start: 0, End: 100, Master: addrA}, {Start: 100, End: 200, Master: addrB}},
		"past 16383":  {{Start: 16000, End: 16384, Master: addrA}},
		"end < start": {{Start: 10, End: 9, Master: addrA}},
		"no master":   {{Start: 0, End: 9}},
	} {
		m, err := NewSlotMap(bad)
		assert.Error(t, err, name)
		assert.Empty(t, m.Ranges, name)
	}
}

func TestSlotMapMasterOf(t *testing.T) {
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
	_, ok := SlotMap{}.MasterOf(0)
	assert.False(t, ok)
	_, ok = SlotMap{Ranges: []SlotRange{{Start: 0, End: 16383}}}.MasterOf(0)
	assert.False(t, ok, "a hand-built range without a master owns nothing")
}
