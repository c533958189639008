package cluster_test

import (
	"fmt"
	"testing"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/cluster"
	"github.com/stretchr/testify/assert"
)

// TestKeySlot pins KeySlot to the slots CLUSTER KEYSLOT gives (read from
// Redis 7.0), hash tags included, and to the slots of a layout's keys.
func TestKeySlot(t *testing.T) {
	for key, want := range map[string]uint16{
		"":                     0,
		"foo":                  12182,
		"123456789":            12739, // CRC16/XMODEM 0x31C3 mod 16384
		"{user1000}.following": 3443,
		"{user1000}.followers": 3443,
		"foo{}{bar}":           8363, // "{}" hashes the whole key
		"foo{{bar}}zap":        4015, // the tag is "{bar"
		"foo{bar}{zap}":        5061, // only the first tag counts
	} {
		assert.Equal(t, want, cluster.KeySlot(key), "%q", key)
	}
	l, err := shardcast.NewLayout(128, "app:")
	assert.NoError(t, err)
	for p := range l.Partitions() {
		assert.Equal(t, l.Slot(p), cluster.KeySlot(l.PartitionKey(p, "room")), "partition %d", p)
	}
}

// The master that holds an application's layout record, read from a slot
// map without asking the cluster.
func ExampleKeySlot() {
	slots, err := shardcast.NewSlotMap([]shardcast.SlotRange{
		{Start: 0, End: 8191, Master: "10.0.0.1:6379"},
		{Start: 8192, End: 16383, Master: "10.0.0.2:6379"},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	key := shardcast.Agreement{App: "chat:"}.RecordKey()
	slot := cluster.KeySlot(key)
	master, _ := slots.MasterOf(slot)
	fmt.Println(key, "is in slot", slot, "on", master)
	// Output:
	// chat:{7lw}:shardcast-layout:record is in slot 2 on 10.0.0.1:6379
}
