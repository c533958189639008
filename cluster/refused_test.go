package cluster

import (
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/crc16"
	"github.com/shardcast/shardcast/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRefusedUnsubscribeDropsTheWire: when a master refuses a SUNSUBSCRIBE
// on a live wire (here an ACL forbids the command), the broker cannot know
// what Redis still holds, so it drops that master's wire; the reconnect
// resubscribes only the channels still wanted.
func TestRefusedUnsubscribeDropsTheWire(t *testing.T) {
	c := redistest.StartCluster(t, 1, 0, redistest.WithArgs("--user", "app", "on", ">pw", "~*", "&*", "+@all", "-sunsubscribe"))
	ctx := testCtx(t, time.Minute)
	events := &eventLog{}
	sub := newBroker(t, Config{Addrs: c.Seeds(), Conn: shardcast.ConnOptions{Username: "app", Password: "pw"},
		Options: shardcast.Options{Handler: func(shardcast.Message) {}, OnEvent: events.Add}})
	require.NoError(t, sub.Subscribe(ctx, "gone", "kept"))
	l := sub.Layout()

	require.NoError(t, sub.Unsubscribe(ctx, "gone"))
	require.True(t, waitFor(10*time.Second, func() bool {
		restored, _ := eventPartitions(events, shardcast.EventRestored)
		return restored[l.Partition("kept")]
	}), "the dropped wire was not resubscribed")
	node := c.Nodes()[0]
	for ch, want := range map[string]int64{"gone": 0, "kept": 1} {
		key := l.Key(ch)
		require.Equal(t, crc16.Slot(key), l.Slot(l.Partition(ch)))
		n, err := node.Do(ctx, "PUBSUB", "SHARDNUMSUB", key)
		require.NoError(t, err)
		assert.Equal(t, []any{key, want}, n, "channel %s", ch)
	}
	assert.Equal(t, 1, sub.Stats().Channels)

	// The same credentials given as a redis:// URL seed reach every node:
	// the subscribe and publishing connections and the seed's slot-map
	// question.
	rec := newRecorder()
	viaURL := newBroker(t, Config{Addrs: []string{"redis://app:pw@" + c.Seeds()[0]},
		Options: shardcast.Options{Handler: rec.handle}})
	require.NoError(t, viaURL.Subscribe(ctx, "url"))
	require.NoError(t, viaURL.Publish(ctx, "url", []byte("1")))
	require.True(t, waitFor(10*time.Second, func() bool { return rec.count("url") == 1 }), "no delivery with URL credentials")
}
