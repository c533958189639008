package cluster

import (
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/pubconn"
	"github.com/shardcast/shardcast/internal/subconn"
	"github.com/shardcast/shardcast/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRestartedMasterNotResubscribed SIGKILLs a master, waits for its
// replica to take over and restarts it at once, as a supervisor would,
// while a publisher sends numbered messages to the successor. The
// restarted node loads its old nodes.conf and claims its old slots until
// the cluster bus tells it otherwise (milliseconds; longer on a loaded
// host), and takes SSUBSCRIBE meanwhile (cluster-allow-pubsubshard-when-
// down). A subscribe link that reconnected in that moment subscribed its
// partitions there and reported them Restored (every run of this test,
// before), while their messages went to the successor; the interruption
// reported when the node learned the truth dates from the link's last
// health ping, so when a ping was answered in between (the node stale for
// more than a HealthInterval, as under CI load), what the successor got
// from the Restored to that ping was lost outside every reported window
// (CI: TestRelayoutRedisFaults/RecordMasterKilledDuringPrepare on Valkey
// 8.0.1, 3 silent of 15 lost). A link that reconnects now subscribes
// nothing until a slot map from another node lists its node.
func TestRestartedMasterNotResubscribed(t *testing.T) {
	c := redistest.StartCluster(t, 3, 1)
	rec, events := newRecorder(), &eventLog{}
	conn := faultConn
	conn.ReconnectMin, conn.ReconnectMax = 5*time.Millisecond, 20*time.Millisecond
	// Polls far apart, so that the link's reconnects, not a poll, are
	// what first reaches the restarted node.
	conn.RecoveryInterval = 2 * time.Second
	sub := newBroker(t, Config{Addrs: c.Seeds(), Conn: conn, Options: shardcast.Options{Handler: rec.handle, OnEvent: events.Add}})
	l := sub.Layout()
	ctx := testCtx(t, 2*time.Minute)
	masters, err := c.Masters(ctx)
	require.NoError(t, err)
	victim := masters[0]
	parts := sortedCopy(sub.Masters()[victim.Addr()])
	require.NotEmpty(t, parts)
	channels := inPartitions(l, channelsPerPartition(l, 1, "rm."), parts)
	require.NoError(t, sub.Subscribe(ctx, channels...))

	require.NoError(t, victim.Kill())
	killed := time.Now()
	promoted, err := c.WaitFailover(ctx, victim)
	require.NoError(t, err)
	newPub := pubconn.New(subconn.Dialer{Addr: promoted.Addr()}, pubconn.Timeouts{})
	t.Cleanup(newPub.Close)
	require.NoError(t, newPub.Ping(ctx))
	traffic := newOrderTraffic(l, channels)
	traffic.start(ctx, newPub)
	require.NoError(t, victim.Restart(ctx))
	t.Logf("replica %s promoted %v after the kill; %s restarted", promoted.Addr(), time.Since(killed).Round(time.Millisecond), victim.Addr())

	require.True(t, waitFor(30*time.Second, func() bool {
		return len(sub.Masters()[promoted.Addr()]) >= len(parts) && !sub.core.Degraded()
	}), "the subscriber never moved to %s", promoted.Addr())
	time.Sleep(300 * time.Millisecond) // traffic on the settled subscription
	traffic.halt()
	waitFor(5*time.Second, func() bool {
		for _, ch := range channels {
			seqs := rec.seqs(ch)
			if len(seqs) == 0 || seqs[len(seqs)-1] != traffic.last(ch) {
				return false
			}
		}
		return true
	})
	var stale []string
	for _, ev := range events.Of(shardcast.EventRestored) {
		if ev.Shard == victim.Addr() && ev.Until.After(killed) {
			stale = append(stale, ev.Until.Format("15:04:05.000000"))
		}
	}
	for _, ev := range events.All() {
		if ev.Kind == shardcast.EventRestored || ev.Kind == shardcast.EventInterrupted {
			t.Logf("event %s shard=%s since=%s until=%s err=%v", ev.Kind, ev.Shard, ev.Since.Format("15:04:05.000000"),
				ev.Until.Format("15:04:05.000000"), ev.Err)
		}
	}
	rep := traffic.check(rec, events.All(), l)
	t.Logf("FIGURE restarted master: %d acknowledged on %d channels, %d lost (%d outside every reported window); Restored on the restarted node: %v",
		rep.acked, len(channels), rep.lost, len(rep.unreported), stale)
	assert.Empty(t, stale, "partitions restored on the restarted node, which had lost its slots")
	assert.Empty(t, head(rep.unreported, 10), "lost outside every reported window")
}
