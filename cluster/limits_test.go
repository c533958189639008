package cluster

import (
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMaxClients: a node at maxclients refuses new connections with an
// error reply. New then fails and says why (the rueidis client cannot
// read the slot map). A subscribe connection dropped while the node is
// full is reported interrupted, and its reconnect keeps being refused and
// retried, reported as EventError naming the node and the cause (once for
// the first refusal, then once every ten), while the broker's open
// connections keep publishing and polling the slot map. Once a client
// slot frees, the subscribe connection gets it, the channel is restored
// and delivers.
func TestMaxClients(t *testing.T) {
	c := redistest.StartCluster(t, 1, 0)
	node := c.Nodes()[0]
	ctx := testCtx(t, time.Minute)
	admin, err := node.Dial(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = admin.Close() })
	rec := newRecorder()
	events := &eventLog{}
	b := newBroker(t, Config{Addrs: c.Seeds(), Options: shardcast.Options{Handler: rec.handle, OnEvent: events.Add},
		Conn: shardcast.ConnOptions{ReconnectMin: 5 * time.Millisecond, ReconnectMax: 20 * time.Millisecond}})
	require.NoError(t, b.Subscribe(ctx, "limit"))
	require.NoError(t, b.Publish(ctx, "limit", []byte("1"))) // opens the publishing connection
	require.True(t, waitFor(20*time.Second, func() bool { return rec.count("limit") == 1 }))

	// Full: every slot taken, the last by a filler.
	open, err := admin.ClientsOpen(ctx)
	require.NoError(t, err)
	require.NoError(t, admin.SetMaxClients(ctx, open+1))
	filler, err := node.Dial(ctx)
	require.NoError(t, err)
	_, err = node.Dial(ctx)
	require.ErrorContains(t, err, "max number of clients", "the node is full")

	refused, newErr := New(Config{Addrs: c.Seeds()})
	require.Error(t, newErr)
	require.Nil(t, refused)
	assert.ErrorContains(t, newErr, node.Addr())
	assert.ErrorContains(t, newErr, "max number of clients")

	// One slot fewer, then the kill: the subscribe connection's slot is
	// gone with it.
	require.NoError(t, admin.SetMaxClients(ctx, open))
	before, err := admin.RejectedConnections(ctx)
	require.NoError(t, err)
	killed, err := admin.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub")
	require.NoError(t, err)
	require.EqualValues(t, 1, killed)
	require.True(t, waitFor(20*time.Second, func() bool { return len(events.Of(shardcast.EventInterrupted)) == 1 }), "no interruption")
	var attempts int
	require.True(t, waitFor(20*time.Second, func() bool {
		n, err := admin.RejectedConnections(ctx)
		require.NoError(t, err)
		attempts = n - before
		return attempts >= 10 && len(events.Of(shardcast.EventError)) > 0
	}), "%d refusals, %d reported", attempts, len(events.Of(shardcast.EventError)))
	for _, ev := range events.Of(shardcast.EventError) {
		assert.Equal(t, node.Addr(), ev.Shard)
		assert.ErrorContains(t, ev.Err, "max number of clients")
	}
	assert.LessOrEqual(t, len(events.Of(shardcast.EventError)), attempts/10+1, "one report per ten refusals")
	assert.Empty(t, events.Of(shardcast.EventRestored), "nothing is restored while the node is full")
	require.NoError(t, b.Publish(ctx, "limit", []byte("unheard")), "the open publishing connection keeps working")

	require.NoError(t, filler.Close())
	require.True(t, waitFor(20*time.Second, func() bool { return len(events.Of(shardcast.EventRestored)) == 1 }), "no restore")
	assert.Equal(t, []string{"limit"}, events.Of(shardcast.EventRestored)[0].Channels)
	require.NoError(t, b.Publish(ctx, "limit", []byte("3")))
	require.True(t, waitFor(20*time.Second, func() bool { return rec.count("limit") == 2 }), "no delivery after the restore")
	assert.Equal(t, []uint64{1, 3}, rec.seqs("limit"))
	t.Logf("%d reconnects refused, %d reported; New at the limit: %v", attempts, len(events.Of(shardcast.EventError)), newErr)
}
