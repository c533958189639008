package sharded

import (
	"context"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMaxClients: an instance at maxclients refuses new connections with
// an error reply. New then fails and says why. A subscribe connection
// dropped while the instance is full is reported interrupted, and its
// reconnect keeps being refused and retried, reported as EventError
// naming the instance and the cause (once for the first refusal, then
// once every ten); the publisher's open connection keeps working. Once a
// client slot frees, the subscribe connection gets it, the channel is
// restored and delivers.
func TestMaxClients(t *testing.T) {
	s := redistest.StartStandalone(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	admin, err := s.Dial(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = admin.Close() })
	rec := newRecorder()
	var evs events
	sub := newBroker(t, Config{Addrs: addrs(s), Options: shardcast.Options{Handler: rec.handle, OnEvent: evs.Add},
		Conn: shardcast.ConnOptions{ReconnectMin: 5 * time.Millisecond, ReconnectMax: 20 * time.Millisecond}})
	pub := newBroker(t, Config{Addrs: addrs(s)})
	require.NoError(t, sub.Subscribe(ctx, "limit"))

	// Full: every slot taken, the last by a filler.
	open, err := admin.ClientsOpen(ctx)
	require.NoError(t, err)
	require.NoError(t, admin.SetMaxClients(ctx, open+1))
	filler, err := s.Dial(ctx)
	require.NoError(t, err)
	_, err = s.Dial(ctx)
	require.ErrorContains(t, err, "max number of clients reached", "the instance is full")

	b, err := New(Config{Addrs: addrs(s)})
	require.Error(t, err)
	require.Nil(t, b)
	assert.ErrorContains(t, err, s.Addr())
	assert.ErrorContains(t, err, "max number of clients reached")

	// One slot fewer, then the kill: the subscribe connection's slot is
	// gone with it.
	require.NoError(t, admin.SetMaxClients(ctx, open))
	refused, err := admin.RejectedConnections(ctx)
	require.NoError(t, err)
	killed, err := admin.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub")
	require.NoError(t, err)
	require.EqualValues(t, 1, killed)
	waitFor(t, "the interruption", func() bool { return len(evs.Of(shardcast.EventInterrupted)) == 1 })
	waitFor(t, "a reported refusal", func() bool { return len(evs.Of(shardcast.EventError)) > 0 })
	var attempts int
	waitFor(t, "ten more refused reconnects", func() bool {
		n, err := admin.RejectedConnections(ctx)
		require.NoError(t, err)
		attempts = n - refused
		return attempts >= 10
	})
	for _, ev := range evs.Of(shardcast.EventError) {
		assert.Equal(t, s.Addr(), ev.Shard)
		assert.ErrorContains(t, ev.Err, "max number of clients reached")
	}
	assert.LessOrEqual(t, len(evs.Of(shardcast.EventError)), attempts/10+1, "one report per ten refusals")
	assert.Empty(t, evs.Of(shardcast.EventRestored), "nothing is restored while the instance is full")
	require.NoError(t, pub.Publish(ctx, "limit", []byte("unheard")), "the publisher's open connection keeps working")

	require.NoError(t, filler.Close())
	waitFor(t, "the restore", func() bool { return len(evs.Of(shardcast.EventRestored)) == 1 })
	assert.Equal(t, []string{"limit"}, evs.Of(shardcast.EventRestored)[0].Channels)
	assert.EqualValues(t, 1, sub.Stats().Reconnects)
	require.NoError(t, pub.Publish(ctx, "limit", []byte("heard")))
	waitFor(t, "delivery after the restore", func() bool { return rec.count("limit") == 1 })
	assert.Equal(t, "heard", string(rec.get("limit")[0].Payload))
	t.Logf("%d reconnects refused, %d reported", attempts, len(evs.Of(shardcast.EventError)))
}
