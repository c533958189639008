package cluster

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSharedCluster runs the tests that only subscribe and publish on one
// 3-master, 1-replica-each cluster, one subtest after the other: starting
// a cluster costs about 2 s, and the harness ties a cluster to a test.
// Each subtest closes its brokers before the next one starts.
func TestSharedCluster(t *testing.T) {
	c := redistest.StartCluster(t, 3, 1)
	t.Run("OneSubscribeConnectionPerMaster", func(t *testing.T) {
		for _, parts := range []int{128, 1024} {
			t.Run(strconv.Itoa(parts), func(t *testing.T) { testOneConnectionPerMaster(t, c, parts) })
		}
	})
	t.Run("ConnsPerMaster", func(t *testing.T) { testConnsPerMaster(t, c) })
	t.Run("ConcurrentCalls", func(t *testing.T) { testConcurrentCalls(t, c) })
	t.Run("NoBroadcast", func(t *testing.T) { testNoBroadcast(t, c) })
	t.Run("DeliveryOrderAndUnsubscribe", func(t *testing.T) { testDeliveryAndUnsubscribe(t, c) })
	t.Run("BadInput", func(t *testing.T) { testBadInput(t, c) })
	t.Run("PublishOnly", func(t *testing.T) { testPublishOnly(t, c) })
	t.Run("Raw", func(t *testing.T) { testRaw(t, c) })
	t.Run("Conformance", func(t *testing.T) { testConformance(t, c) })
}

// waitNoSubscribers waits until no master holds a sharded subscription,
// so that a subtest counts only its own broker's connections.
func waitNoSubscribers(t *testing.T, masters []*redistest.Server) {
	t.Helper()
	ctx := testCtx(t, 30*time.Second)
	var last error
	ok := waitFor(10*time.Second, func() bool {
		for _, m := range masters {
			n, err := ssubClients(ctx, m)
			if err != nil || len(n) > 0 {
				last = err
				return false
			}
		}
		return true
	})
	require.True(t, ok, "sharded subscribers left on the masters (last error %v)", last)
}

func testOneConnectionPerMaster(t *testing.T, c *redistest.Cluster, partitions int) {
	ctx := testCtx(t, time.Minute)
	masters, err := c.Masters(ctx)
	require.NoError(t, err)
	require.Len(t, masters, 3)
	waitNoSubscribers(t, masters)

	rec := newRecorder()
	sub := newBroker(t, Config{Addrs: c.Seeds(), Partitions: partitions,
		Options: shardcast.Options{Handler: rec.handle}})
	channels := numbered("conn.", 12800)
	require.NoError(t, sub.Subscribe(ctx, channels...))

	owned := sub.Masters()
	require.Len(t, owned, 3, "the broker must know exactly the 3 masters")
	l := sub.Layout()
	for _, m := range masters {
		parts, ok := owned[m.Addr()]
		require.True(t, ok, "no partitions for master %s", m.Addr())
		want := len(inPartitions(l, channels, parts))
		clients, err := ssubClients(ctx, m)
		require.NoError(t, err)
		// Exactly one connection, and it carries every channel of the
		// master's partitions.
		assert.Equal(t, []int{want}, clients, "sharded subscriber connections on %s (partitions %d)", m.Addr(), len(parts))
		t.Logf("%d partitions: master %s owns %d partitions, %d channels, ssub connections %v",
			partitions, m.Addr(), len(parts), want, clients)
	}

	pub := newBroker(t, Config{Addrs: c.Seeds(), Partitions: partitions})
	sample := make([]string, 0, len(channels)/10)
	for i := 0; i < len(channels); i += 10 {
		sample = append(sample, channels[i])
	}
	publishAll(t, pub, sample, "1")
	require.True(t, waitFor(20*time.Second, func() bool { return rec.seen.Load() >= int64(len(sample)) }),
		"delivered %d of %d", rec.seen.Load(), len(sample))
	for _, ch := range sample {
		assert.Equal(t, 1, rec.count(ch), "channel %s", ch)
	}

	// Close releases the subscribe connections.
	require.NoError(t, sub.Close())
	waitNoSubscribers(t, masters)
}

func testNoBroadcast(t *testing.T, c *redistest.Cluster) {
	ctx := testCtx(t, time.Minute)
	const counter = "cluster_stats_messages_publishshard_sent"
	pub := newBroker(t, Config{Addrs: c.Seeds()})
	const channel = "no-broadcast"
	owner, err := c.MasterOfSlot(ctx, pub.Layout().Slot(pub.Layout().Partition(channel)))
	require.NoError(t, err)
	masters, err := c.Masters(ctx)
	require.NoError(t, err)

	read := func() map[string]int64 {
		out := make(map[string]int64)
		for _, m := range masters {
			info, err := clusterInfo(ctx, m)
			require.NoError(t, err)
			n, _ := strconv.ParseInt(info[counter], 10, 64) // absent means 0
			out[m.Addr()] = n
		}
		return out
	}
	before := read()
	for i := range 1000 {
		require.NoError(t, pub.Publish(ctx, channel, []byte(strconv.Itoa(i))))
	}
	after := read()
	for _, m := range masters {
		d := after[m.Addr()] - before[m.Addr()]
		t.Logf("master %s: %s +%d (owner: %v)", m.Addr(), counter, d, m == owner)
		if m == owner {
			// One bus message per publish per replica of the shard.
			assert.GreaterOrEqual(t, d, int64(1000), "owner %s", m.Addr())
		} else {
			assert.Zero(t, d, "master %s does not own %q and must not see its publishes", m.Addr(), channel)
		}
	}
}

func testDeliveryAndUnsubscribe(t *testing.T, c *redistest.Cluster) {
	ctx := testCtx(t, time.Minute)
	rec := newRecorder()
	sub := newBroker(t, Config{Addrs: c.Seeds(), Prefix: "app:",
		Options: shardcast.Options{Handler: rec.handle}})
	pub := newBroker(t, Config{Addrs: c.Seeds(), Prefix: "app:"})
	channels := channelsPerPartition(sub.Layout(), 2, "d.")
	require.NoError(t, sub.Subscribe(ctx, channels...))
	require.NoError(t, sub.Subscribe(ctx, channels[:10]...), "Subscribe is idempotent")
	assert.Equal(t, len(channels), sub.Stats().Channels)

	const perChannel = 20
	for i := 1; i <= perChannel; i++ {
		publishAll(t, pub, channels, strconv.Itoa(i))
	}
	require.True(t, waitFor(20*time.Second, func() bool { return rec.seen.Load() >= int64(perChannel*len(channels)) }),
		"delivered %d of %d", rec.seen.Load(), perChannel*len(channels))
	for _, ch := range channels {
		// publishAll finishes round i before round i+1, so per-channel
		// order is the round order.
		want := make([]uint64, perChannel)
		for i := range want {
			want[i] = uint64(i + 1)
		}
		require.Equal(t, want, rec.seqs(ch), "channel %s", ch)
	}
	assert.False(t, rec.first(channels[0]).published.IsZero(), "the envelope carries the publish time")

	// Unsubscribe half of them (twice: it is idempotent); only the other
	// half delivers. A marker channel published last tells when the
	// publishes before it have been delivered.
	gone, kept := channels[:len(channels)/2], channels[len(channels)/2:]
	require.NoError(t, sub.Unsubscribe(ctx, gone...))
	require.NoError(t, sub.Unsubscribe(ctx, gone...))
	require.NoError(t, sub.Unsubscribe(ctx, "never-subscribed"))
	assert.Equal(t, len(kept), sub.Stats().Channels)
	publishAll(t, pub, channels, "100")
	require.True(t, waitFor(20*time.Second, func() bool { return allAt(rec, kept, perChannel+1) }),
		"kept channels did not all deliver")
	// The unsubscribed channels were published before the kept ones of the
	// same wires; one more round on the kept channels leaves stragglers
	// time to show up before the counts are checked.
	publishAll(t, pub, kept, "101")
	require.True(t, waitFor(20*time.Second, func() bool { return allAt(rec, kept, perChannel+2) }))
	for _, ch := range gone {
		assert.Equal(t, perChannel, rec.count(ch), "unsubscribed channel %s still delivers", ch)
	}
	st := sub.Stats()
	assert.Equal(t, uint64(perChannel*len(channels)+2*len(kept)), st.Delivered)
	assert.Zero(t, st.Dropped)
}

// allAt reports whether every channel received at least n messages.
func allAt(rec *recorder, channels []string, n int) bool {
	for _, ch := range channels {
		if rec.count(ch) < n {
			return false
		}
	}
	return true
}

func testBadInput(t *testing.T, c *redistest.Cluster) {
	ctx := testCtx(t, time.Minute)
	rec := newRecorder()
	b, err := New(Config{Addrs: c.Seeds(), Options: shardcast.Options{Handler: rec.handle, MaxPayload: 16}})
	require.NoError(t, err)

	require.ErrorIs(t, b.Publish(ctx, "", []byte("x")), shardcast.ErrInvalidChannel)
	require.ErrorIs(t, b.Subscribe(ctx, "ok", ""), shardcast.ErrInvalidChannel)
	require.ErrorIs(t, b.Unsubscribe(ctx, ""), shardcast.ErrInvalidChannel)
	assert.Zero(t, b.Stats().Channels, "a rejected Subscribe subscribes nothing")
	require.ErrorIs(t, b.Publish(ctx, "ch", make([]byte, 17)), shardcast.ErrPayloadTooLarge)
	require.NoError(t, b.Publish(ctx, "ch", make([]byte, 16)))

	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, b.Publish(cancelled, "ch", []byte("x")), context.Canceled)
	require.ErrorIs(t, b.Subscribe(cancelled, "ch"), context.Canceled)
	assert.Zero(t, b.Stats().Channels)

	require.NoError(t, b.Close())
	require.NoError(t, b.Close(), "Close is idempotent")
	require.ErrorIs(t, b.Publish(ctx, "ch", []byte("x")), shardcast.ErrClosed)
	require.ErrorIs(t, b.Subscribe(ctx, "ch"), shardcast.ErrClosed)
	require.ErrorIs(t, b.Unsubscribe(ctx, "ch"), shardcast.ErrClosed)
}

func testPublishOnly(t *testing.T, c *redistest.Cluster) {
	ctx := testCtx(t, time.Minute)
	masters, err := c.Masters(ctx)
	require.NoError(t, err)
	waitNoSubscribers(t, masters)
	pub := newBroker(t, Config{Addrs: c.Seeds()})
	err = pub.Subscribe(ctx, "ch")
	require.ErrorIs(t, err, shardcast.ErrNoHandler)
	require.NoError(t, pub.Unsubscribe(ctx, "ch"))
	require.NoError(t, pub.Publish(ctx, "ch", []byte("x")))
	assert.Empty(t, pub.Masters(), "a publish-only broker holds no subscribe connection")
	for _, m := range masters {
		n, err := ssubClients(ctx, m)
		require.NoError(t, err)
		assert.Empty(t, n, "master %s", m.Addr())
	}
	assert.Equal(t, uint64(1), pub.Stats().Published)
}

func testRaw(t *testing.T, c *redistest.Cluster) {
	ctx := testCtx(t, time.Minute)
	rec := newRecorder()
	sub := newBroker(t, Config{Addrs: c.Seeds(), Options: shardcast.Options{Handler: rec.handle, Raw: true}})
	pub := newBroker(t, Config{Addrs: c.Seeds(), Options: shardcast.Options{Raw: true}})
	require.NoError(t, sub.Subscribe(ctx, "raw"))
	require.NoError(t, pub.Publish(ctx, "raw", []byte("42")))
	require.True(t, waitFor(10*time.Second, func() bool { return rec.count("raw") == 1 }))
	got := rec.first("raw")
	assert.Equal(t, uint64(42), got.seq)
	assert.True(t, got.published.IsZero(), "raw messages carry no publish time")
}

// TestInvalidConfig checks that New rejects settings that cannot work
// before it touches the network.
func TestInvalidConfig(t *testing.T) {
	for name, cfg := range map[string]Config{
		"no addrs":       {},
		"url not addr":   {Addrs: []string{"redis://127.0.0.1:6379"}},
		"no port":        {Addrs: []string{"127.0.0.1"}},
		"100 partitions": {Addrs: []string{"127.0.0.1:1"}, Partitions: 100},
		"negative":       {Addrs: []string{"127.0.0.1:1"}, TopologyInterval: -time.Second},
		"workers":        {Addrs: []string{"127.0.0.1:1"}, Options: shardcast.Options{Workers: -1}},
	} {
		t.Run(name, func(t *testing.T) {
			b, err := New(cfg)
			require.ErrorIs(t, err, shardcast.ErrInvalidConfig)
			require.Nil(t, b)
		})
	}
}

// TestUnreachable checks that New fails with an error, not a hang or a
// broker that never works, when no seed answers.
func TestUnreachable(t *testing.T) {
	s := redistest.StartStandalone(t) // a free port that then goes away
	addr := s.Addr()
	require.NoError(t, s.Stop())
	b, err := New(Config{Addrs: []string{addr}, DialTimeout: time.Second})
	require.Error(t, err)
	require.Nil(t, b)
	assert.False(t, errors.Is(err, shardcast.ErrInvalidConfig))
	assert.True(t, strings.Contains(err.Error(), addr), "error %q names the seed", err)
}
