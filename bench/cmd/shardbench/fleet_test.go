package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// With the scenario's default channel names every broker has a probe in
// each of the 128 partitions, under both engines' mappings, and each
// probe is the first channel of its partition.
func TestProbeChannelsCoverEveryPartition(t *testing.T) {
	for _, engine := range []string{"shardcast-cluster", "centrifuge-sharded"} {
		partition, err := fleetPartitioner(engine)
		require.NoError(t, err)
		names := channelNames("fl:"+engine+":7:", 10000)
		probes := probeChannels(names, partition)
		assert.Len(t, probes, 128, engine)
		first := map[int]string{}
		for _, ch := range names {
			p := partition(ch)
			assert.True(t, p >= 0 && p < 128, "%s: partition %d", engine, p)
			if _, ok := first[p]; !ok {
				first[p] = ch
			}
		}
		for _, ch := range probes {
			assert.Equal(t, first[partition(ch)], ch, engine)
		}
	}
	_, err := fleetPartitioner("go-redis-cluster")
	assert.Error(t, err)
}

// The jump hash spreads keys over every bucket and keeps most keys in
// place when a bucket is added, which is what makes it that algorithm.
func TestJumpHash(t *testing.T) {
	moved := 0
	seen := map[int]bool{}
	for k := uint64(0); k < 10000; k++ {
		a, b := jumpHash(k*0x9e3779b97f4a7c15, 128), jumpHash(k*0x9e3779b97f4a7c15, 129)
		seen[a] = true
		if a != b {
			assert.Equal(t, 128, b)
			moved++
		}
	}
	assert.Len(t, seen, 128)
	assert.Less(t, moved, 200) // about 10000/129
	assert.Equal(t, 0, jumpHash(12345, 1))
}
