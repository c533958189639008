package cluster

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSlotGapIsNotAMove: a node whose view names no master for some slots
// (here made with CLUSTER DELSLOTSRANGE on that node alone, which gossip
// repairs within a second; a failover once showed such a view too) is the
// broker's only seed. The broker keeps the partitions of those slots on
// their master instead of moving them to no master and back: no
// interruption is reported, and they keep delivering.
func TestSlotGapIsNotAMove(t *testing.T) {
	c := redistest.StartCluster(t, 3, 0)
	nodes := c.Nodes()
	seed, owner := nodes[0], nodes[1]
	var evs eventLog
	rec := newRecorder()
	b := newBroker(t, Config{Addrs: []string{seed.Addr()}, TopologyInterval: 50 * time.Millisecond,
		Options: shardcast.Options{Handler: rec.handle, OnEvent: evs.Add}})
	ctx := testCtx(t, 30*time.Second)
	parts := b.Masters()[owner.Addr()]
	require.NotEmpty(t, parts)
	l := b.Layout()
	var channels []string
	for i := 0; len(channels) < 20; i++ {
		if ch := "gap-" + strconv.Itoa(i); slices.Contains(parts, l.Partition(ch)) {
			channels = append(channels, ch)
		}
	}
	require.NoError(t, b.Subscribe(ctx, channels...))
	before := len(evs.Of(shardcast.EventInterrupted))

	// The owner's slot ranges, as the seed sees them.
	reply, err := seed.Do(ctx, "CLUSTER", "SLOTS")
	require.NoError(t, err)
	m, err := ParseSlots(reply, seed.Addr())
	require.NoError(t, err)
	args := []string{"CLUSTER", "DELSLOTSRANGE"}
	for _, r := range m.Ranges {
		if r.Master == owner.Addr() {
			args = append(args, strconv.Itoa(int(r.Start)), strconv.Itoa(int(r.End)))
		}
	}
	require.Greater(t, len(args), 2)
	_, err = seed.Do(ctx, args...)
	require.NoError(t, err)
	time.Sleep(time.Second) // polls read the gap until gossip repairs it

	assert.Len(t, evs.Of(shardcast.EventInterrupted), before, "a slot gap in one node's view interrupted partitions")
	assert.Equal(t, parts, sortedCopy(b.Masters()[owner.Addr()]))
	for _, ch := range channels {
		require.NoError(t, b.Publish(ctx, ch, []byte("after")))
	}
	require.Eventually(t, func() bool {
		for _, ch := range channels {
			if rec.count(ch) == 0 {
				return false
			}
		}
		return true
	}, 10*time.Second, 10*time.Millisecond, "every channel delivers")
}
