package cluster

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/brokertest"
	"github.com/shardcast/shardcast/internal/engine"
	"github.com/shardcast/shardcast/internal/pubconn"
	"github.com/shardcast/shardcast/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMaxClients: a node at maxclients refuses new connections with an
// error reply. New then fails and says why (Redis's refusal, read
// on the seed connection). A subscribe connection dropped while the node is
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

// TestCloseDuringReconnectStorm: four brokers, each with 20,000 channels
// over two masters (two subscribe connections to each), have their
// subscribe connections killed every few milliseconds while Subscribe
// calls wait for them. Closed in the middle of it, after the masters
// froze, or after one died, every broker's Close returns promptly (it
// does not wait out a slot-map poll of a frozen master), every call in
// flight returns, and no goroutine is left (brokertest.Storm).
func TestCloseDuringReconnectStorm(t *testing.T) {
	c := redistest.StartCluster(t, 2, 0)
	for _, end := range []string{"storm", "frozen", "killed"} {
		if end == "killed" {
			c = redistest.StartCluster(t, 2, 0) // the frozen one may not be back
		}
		t.Run(end, func(t *testing.T) {
			masters, err := c.Masters(testCtx(t, time.Minute))
			require.NoError(t, err)
			storm := brokertest.Storm{
				New: func(opts shardcast.Options) (shardcast.Broker, error) {
					return New(Config{Addrs: c.Seeds(), Options: opts, SlotsTimeout: time.Minute, Conn: stormConn})
				},
				Brokers: 4, Channels: 20_000,
				KillSubscribers: func(ctx context.Context) error {
					for _, m := range masters {
						if _, err := m.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub"); err != nil {
							return err
						}
					}
					return nil
				},
			}
			switch end {
			case "frozen":
				storm.Then = func(t *testing.T) {
					for _, m := range masters {
						require.NoError(t, m.Pause())
						t.Cleanup(func() { _ = m.Resume() })
					}
					// Unanswered pings ask for slot-map polls: Close once
					// every broker's poll waits for a frozen master.
					require.True(t, waitFor(30*time.Second, func() bool { return goroutinesIn("cluster.(*Broker).slotsFrom") >= storm.Brokers }),
						"the brokers did not poll the frozen masters")
				}
			case "killed":
				storm.Then = func(t *testing.T) { require.NoError(t, masters[0].Kill()) }
			}
			storm.Run(t)
		})
	}
}

// stormConn has the timeouts a Close must not wait out set to a minute
// (see brokertest.Storm) and reconnects at once.
var stormConn = shardcast.ConnOptions{
	SubscribeConns: 2, ReconnectMin: time.Millisecond, ReconnectMax: 10 * time.Millisecond,
	DialTimeout: time.Minute, CommandTimeout: time.Minute, HealthTimeout: time.Minute,
}

// goroutinesIn returns how many goroutines have fn on their stack.
func goroutinesIn(fn string) int {
	buf := make([]byte, 4<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if strings.Contains(g, fn+"(") {
			n++
		}
	}
	return n
}

// TestSlotsPollOfAFrozenNode: a slot-map poll of a frozen node ends at
// once when its ctx does (as Close ends it), however long SlotsTimeout,
// and otherwise after SlotsTimeout, saying so.
func TestSlotsPollOfAFrozenNode(t *testing.T) {
	c := redistest.StartCluster(t, 1, 0)
	node := c.Nodes()[0]
	b := newBroker(t, Config{Addrs: c.Seeds(), SlotsTimeout: time.Hour})
	short := newBroker(t, Config{Addrs: c.Seeds(), SlotsTimeout: 200 * time.Millisecond})
	// Connections of their own, opened before the node freezes, as the
	// brokers' publishing connections are.
	pub := pubconn.New(b.cfg.dialer(node.Addr()), engine.PubTimeouts(b.cfg.Conn))
	defer pub.Close()
	require.NoError(t, pub.Ping(context.Background()))
	shortPub := pubconn.New(short.cfg.dialer(node.Addr()), engine.PubTimeouts(short.cfg.Conn))
	defer shortPub.Close()
	require.NoError(t, shortPub.Ping(context.Background()))
	require.NoError(t, node.Pause())
	defer func() { require.NoError(t, node.Resume()) }()

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := b.slotsFrom(ctx, pub)
		done <- err
	}()
	require.True(t, waitFor(10*time.Second, func() bool { return goroutinesIn("cluster.(*Broker).slotsFrom") > 0 }))
	cancel()
	select {
	case err := <-done:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(5 * time.Second):
		t.Fatal("the poll did not end with its ctx")
	}

	_, err := short.slotsFrom(context.Background(), shortPub)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.ErrorContains(t, err, node.Addr())
}
