package cluster

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/crc16"
	"github.com/shardcast/shardcast/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSharedCluster runs the tests that only subscribe and publish, and
// the Broker conformance suite, on one 3-master, 1-replica-each cluster,
// one subtest after the other: starting a cluster costs about 2 s, and
// the harness ties a cluster to a test.
// Each subtest closes its brokers before the next one starts.
func TestSharedCluster(t *testing.T) {
	c := redistest.StartCluster(t, 3, 1)
	t.Run("OneSubscribeConnectionPerMaster", func(t *testing.T) {
		for _, parts := range []int{128, 1024} {
			t.Run(strconv.Itoa(parts), func(t *testing.T) { testOneConnectionPerMaster(t, c, parts) })
		}
	})
	t.Run("ConnsPerMaster", func(t *testing.T) { testConnsPerMaster(t, c) })
	t.Run("Prefix", func(t *testing.T) { testPrefix(t, c) })
	t.Run("PublishOnlyHoldsNoSubscribeConnection", func(t *testing.T) { testPublishOnly(t, c) })
	t.Run("Eval", func(t *testing.T) { testEval(t, c) })
	t.Run("EvalScriptErrorNotResent", func(t *testing.T) { testEvalScriptErrorNotResent(t, c) })
	t.Run("HotChannels", func(t *testing.T) { testHotChannels(t, c) })
	t.Run("ReadLayout", func(t *testing.T) { testReadLayout(t, c) })
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

// testPrefix: brokers sharing a Prefix reach each other on every
// partition, under a wire key that carries the prefix after the partition
// tag; a broker without the prefix publishes to other keys and does not
// reach them.
func testPrefix(t *testing.T, c *redistest.Cluster) {
	ctx := testCtx(t, time.Minute)
	rec := newRecorder()
	sub := newBroker(t, Config{Addrs: c.Seeds(), Prefix: "app:",
		Options: shardcast.Options{Handler: rec.handle}})
	pub := newBroker(t, Config{Addrs: c.Seeds(), Prefix: "app:"})
	// A node that forgot the prefix: the layout record would refuse it,
	// so it runs without, to show what it would miss.
	unprefixed := newBroker(t, Config{Addrs: c.Seeds(), Agreement: shardcast.Agreement{Off: true}})
	l := sub.Layout()
	channels := channelsPerPartition(l, 1, "d.")
	require.NoError(t, sub.Subscribe(ctx, channels...))

	key := l.Key(channels[0])
	require.True(t, strings.HasSuffix(key, "}.app:"+channels[0]), "wire key %q", key)
	owner, err := c.MasterOfSlot(ctx, crc16.Slot(key))
	require.NoError(t, err)
	n, err := owner.Do(ctx, "PUBSUB", "SHARDNUMSUB", key)
	require.NoError(t, err)
	assert.Equal(t, []any{key, int64(1)}, n, "the prefixed key is subscribed on its master")

	// The unprefixed keys share the partition tag, so the slot and the
	// master: published first, they would arrive before the prefixed ones.
	publishAll(t, unprefixed, channels, "1")
	publishAll(t, pub, channels, "2")
	require.True(t, waitFor(20*time.Second, func() bool { return rec.seen.Load() >= int64(len(channels)) }),
		"delivered %d of %d", rec.seen.Load(), len(channels))
	for _, ch := range channels {
		require.Equal(t, []uint64{2}, rec.seqs(ch), "channel %s", ch)
	}
}

// testPublishOnly: a broker without a Handler opens no subscribe
// connection, even when asked to subscribe. (Its ErrNoHandler and its
// publishing are checked by the conformance suite.)
func testPublishOnly(t *testing.T, c *redistest.Cluster) {
	ctx := testCtx(t, time.Minute)
	masters, err := c.Masters(ctx)
	require.NoError(t, err)
	waitNoSubscribers(t, masters)
	pub := newBroker(t, Config{Addrs: c.Seeds()})
	require.ErrorIs(t, pub.Subscribe(ctx, "ch"), shardcast.ErrNoHandler)
	require.NoError(t, pub.Publish(ctx, "ch", []byte("x")))
	assert.Empty(t, pub.SubscribedOn(), "a publish-only broker holds no subscribe connection")
	for _, m := range masters {
		n, err := ssubClients(ctx, m)
		require.NoError(t, err)
		assert.Empty(t, n, "master %s", m.Addr())
	}
}

// TestInvalidConfig checks that New rejects settings that cannot work
// before it touches the network.
func TestInvalidConfig(t *testing.T) {
	for name, cfg := range map[string]Config{
		"no addrs":       {},
		"bad scheme":     {Addrs: []string{"http://127.0.0.1:6379"}},
		"unix socket":    {Addrs: []string{"unix:///tmp/redis.sock"}},
		"seeds disagree": {Addrs: []string{"redis://app:pw@127.0.0.1:1", "127.0.0.1:2"}},
		"tls disagrees":  {Addrs: []string{"rediss://127.0.0.1:1", "redis://127.0.0.1:2"}},
		"neg recovery":   {Addrs: []string{"127.0.0.1:1"}, Conn: shardcast.ConnOptions{RecoveryInterval: -1}},
		"neg slots":      {Addrs: []string{"127.0.0.1:1"}, SlotsTimeout: -1},
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
	b, err := New(Config{Addrs: []string{addr}, Conn: shardcast.ConnOptions{DialTimeout: time.Second}})
	require.Error(t, err)
	require.Nil(t, b)
	assert.False(t, errors.Is(err, shardcast.ErrInvalidConfig))
	assert.True(t, strings.Contains(err.Error(), addr), "error %q names the seed", err)
}
