package centrifugebroker

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/shardcast/shardcast/cluster"
	"github.com/shardcast/shardcast/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMapSlotMove moves the slot of a map channel's partition to another
// master (its keys MIGRATEd, as a resharding does) while one node keeps
// publishing to it and to a channel in another slot, and a client of
// another node is subscribed to both. It proves that the channel's state,
// stream and meta move with the slot: after the move the whole stream
// reads back, every publication once, in order, at contiguous offsets,
// under the epoch it had, and the state holds each key's last write; and
// that the client misses nothing unreported: without a final publication
// (and with the node's periodic position check off) it ends holding the
// map Redis holds, every publication the node's MapBroker did not deliver
// having been covered by the broker telling the client to resubscribe
// (not only by Centrifuge noticing a gap at the next publication), never
// by a gap in what it received live. The channel in the other slot is left
// alone.
func TestMapSlotMove(t *testing.T) {
	c := redistest.StartCluster(t, 3, 0)
	cfg := Config{Cluster: &cluster.Config{Addrs: c.Seeds()}, CallTimeout: 5 * time.Second}
	_, pubMB, _ := startMapClientNode(t, cfg)
	subNode, subMB, tap := startMapClientNode(t, cfg)
	ctx, cancel := context.WithTimeout(t.Context(), 4*waitTimeout)
	defer cancel()

	l := pubMB.b.engine.(*cluster.Broker).Layout()
	slotOf := func(ch string) uint16 { return l.Slot(l.Partition(pubMB.wire(ch))) }
	prefix := bigMap + "slotmove-" + strconv.FormatInt(time.Now().UnixNano(), 36) + "-"
	moved, stayed := prefix+"0", ""
	slot := slotOf(moved)
	for i := 1; stayed == ""; i++ {
		if ch := prefix + strconv.Itoa(i); slotOf(ch) != slot {
			stayed = ch
		}
	}
	from, err := c.MasterOfSlot(ctx, slot)
	require.NoError(t, err)
	masters, err := c.Masters(ctx)
	require.NoError(t, err)
	var to *redistest.Server
	for _, m := range masters {
		if m != from {
			to = m
			break
		}
	}
	require.NotNil(t, to)

	feed := startMapFeed(t, pubMB, moved, stayed)
	feed.waitRounds(t, 3)
	clients := map[string]*mapClient{moved: newMapClient(t, subNode, moved), stayed: newMapClient(t, subNode, stayed)}
	joined := make(map[string]uint64) // channel → the client's position on going live
	for ch, cl := range clients {
		_, pos, _, _ := cl.view()
		joined[ch] = pos.Offset
	}
	feed.waitRounds(t, 20)

	keys := mapKeyNames(t, pubMB, moved)[:3] // meta, stream, state
	require.NoError(t, c.MoveSlot(ctx, slot, to))
	movedAt := len(feed.updates(moved))
	feed.waitRounds(t, 50)
	require.NoError(t, feed.halt())

	// The keys moved with the slot.
	n, err := to.Do(ctx, append([]string{"EXISTS"}, keys...)...)
	require.NoError(t, err)
	assert.Equal(t, int64(len(keys)), n, "meta, stream and state on the new master")
	_, err = from.Do(ctx, "EXISTS", keys[0])
	assert.ErrorContains(t, err, "MOVED", "the old master redirects")

	for ch, cl := range clients {
		updates := feed.updates(ch)
		checkStream(t, pubMB, ch, updates, 1, updates[0].pos.Epoch)
		waitInStep(t, cl, pubMB)
		r := cl.reportCopy()
		assert.Empty(t, r.Gaps, "%s: nothing missing from what came live", ch)
		assert.Empty(t, r.Failures, ch)
		assert.Empty(t, r.Disconnects, ch)
		undelivered := 0
		for _, u := range updates {
			if u.pos.Offset > joined[ch] && !tap.delivered(ch, u.pos.Offset) {
				undelivered++
			}
		}
		if undelivered > 0 {
			assert.Positive(t, r.Resyncs, "%s: %d publications never reached the node, and its client was not told", ch, undelivered)
			assert.Positive(t, subMB.b.resync.unsubscribed.Load(), "%s: %d publications never reached the node, and the broker told nobody", ch, undelivered)
		}
		if ch == stayed {
			assert.Zero(t, r.Resyncs, "%s: not moved", ch)
		}
		t.Logf("%s: %d publications (%d after the move), %d published since its client subscribed not delivered to the node; client told to resubscribe %d times, recovered %d, started over %d",
			ch, len(updates), len(updates)-movedAt, undelivered, r.Resyncs, r.Recovered, r.Unrecoverable)
	}
	t.Logf("moved slot %d from %s to %s", slot, from.Addr(), to.Addr())
}
