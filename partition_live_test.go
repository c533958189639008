package shardcast_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/crc16"
	"github.com/shardcast/shardcast/redistest"
	"github.com/stretchr/testify/require"
)

// TestSlotsMatchLiveServer checks the library's CRC16 and every shipped tag
// against CLUSTER KEYSLOT on a real Redis Cluster node: the tag tables are
// only balanced if Redis hashes them where we think it does.
func TestSlotsMatchLiveServer(t *testing.T) {
	c := redistest.StartCluster(t, 1, 0)
	node := c.Nodes()[0]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	layout, err := shardcast.NewLayout(4096, "app:")
	require.NoError(t, err)
	var keys []string
	var want []uint16
	for p := range layout.Partitions() {
		keys = append(keys, "{"+layout.Tag(p)+"}")
		want = append(want, layout.Slot(p))
	}
	// Wire keys of channels with braces of their own still hash to the tag.
	for i, ch := range []string{"plain", "{x}", "}{y}", "{}", "a{b}c", "ü{ß}", "\x00\xff{"} {
		ch = fmt.Sprintf("%s-%d", ch, i)
		keys = append(keys, layout.Key(ch))
		want = append(want, layout.Slot(layout.Partition(ch)))
	}
	// A sample of plain keys for CRC16 itself.
	for i := range 500 {
		k := fmt.Sprintf("key:%d:{%d}", i, i%7)
		keys = append(keys, k)
		want = append(want, crc16.Slot(k))
	}
	got, err := node.KeySlots(ctx, keys...)
	require.NoError(t, err)
	require.Equal(t, len(keys), len(got))
	for i := range keys {
		require.Equal(t, want[i], got[i], "key %q", keys[i])
	}
}
