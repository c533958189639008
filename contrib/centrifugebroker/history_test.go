package centrifugebroker

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/centrifugal/centrifuge"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/cluster"
	"github.com/shardcast/shardcast/redistest"
	"github.com/shardcast/shardcast/sharded"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// received is one HandlePublication call.
type received struct {
	pub   *centrifuge.Publication
	sp    centrifuge.StreamPosition
	delta bool
	prev  *centrifuge.Publication
}

// recorder is a centrifuge.BrokerEventHandler that keeps publications.
type recorder struct {
	mu   sync.Mutex
	pubs map[string][]received
}

func (r *recorder) HandlePublication(ch string, pub *centrifuge.Publication, sp centrifuge.StreamPosition, delta bool, prev *centrifuge.Publication) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pubs[ch] = append(r.pubs[ch], received{pub, sp, delta, prev})
	return nil
}
func (r *recorder) HandleJoin(string, *centrifuge.ClientInfo) error  { return nil }
func (r *recorder) HandleLeave(string, *centrifuge.ClientInfo) error { return nil }

func (r *recorder) get(ch string) []received {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]received(nil), r.pubs[ch]...)
}

// historyEnv is a Broker on one engine whose publications go to a
// recorder, with a way to reach the Redis server that holds a channel.
type historyEnv struct {
	b        *Broker
	rec      *recorder
	serverOf func(ch string) *redistest.Server
	// keySlot is the slot a channel's keys must hash to (cluster only).
	keySlot func(ch string) (uint16, bool)
}

func newHistoryEnv(t *testing.T, cfg Config, serverOf func(*Broker, string) *redistest.Server) *historyEnv {
	t.Helper()
	node, err := centrifuge.New(centrifuge.Config{
		LogLevel: centrifuge.LogLevelNone,
		Metrics:  centrifuge.MetricsConfig{RegistererGatherer: prometheus.NewRegistry()},
	})
	require.NoError(t, err)
	b, err := New(node, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, b.Close(context.Background())) })
	rec := &recorder{pubs: make(map[string][]received)}
	require.NoError(t, b.RegisterBrokerEventHandler(rec))
	env := &historyEnv{b: b, rec: rec, serverOf: func(ch string) *redistest.Server { return serverOf(b, ch) }}
	env.keySlot = func(ch string) (uint16, bool) {
		c, ok := b.engine.(*cluster.Broker)
		if !ok {
			return 0, false
		}
		return c.Layout().Slot(c.Layout().Partition(ch)), true
	}
	return env
}

// historyEngines starts, for each engine, a 3-master cluster with one
// replica each or two standalone instances; and one instance in raw mode.
func historyEngines(t *testing.T) map[string]func(t *testing.T) *historyEnv {
	return map[string]func(t *testing.T) *historyEnv{
		"cluster": func(t *testing.T) *historyEnv {
			c := redistest.StartCluster(t, 3, 1)
			return newHistoryEnv(t, Config{Cluster: &cluster.Config{Addrs: c.Seeds()}}, func(b *Broker, ch string) *redistest.Server {
				l := b.engine.(*cluster.Broker).Layout()
				ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
				defer cancel()
				s, err := c.MasterOfSlot(ctx, l.Slot(l.Partition(ch)))
				require.NoError(t, err)
				return s
			})
		},
		"sharded": func(t *testing.T) *historyEnv {
			servers := []*redistest.Server{redistest.StartStandalone(t), redistest.StartStandalone(t)}
			return newHistoryEnv(t, Config{Sharded: &sharded.Config{Addrs: []string{servers[0].Addr(), servers[1].Addr()}}},
				func(b *Broker, ch string) *redistest.Server { return servers[b.engine.(*sharded.Broker).Shard(ch)] })
		},
		// Without an envelope the script publishes the bare frame, and a
		// publication's Time is the one its stream keeps.
		"sharded-raw": func(t *testing.T) *historyEnv {
			s := redistest.StartStandalone(t)
			return newHistoryEnv(t, Config{Sharded: &sharded.Config{Addrs: []string{s.Addr()}, Options: shardcast.Options{Raw: true}}},
				func(*Broker, string) *redistest.Server { return s })
		},
	}
}

func withHistory(size int, ttl time.Duration) centrifuge.PublishOptions {
	return centrifuge.PublishOptions{HistorySize: size, HistoryTTL: ttl}
}

func datas(pubs []*centrifuge.Publication) []string {
	out := make([]string, len(pubs))
	for i, p := range pubs {
		out[i] = fmt.Sprintf("%d:%s", p.Offset, p.Data)
	}
	return out
}

// TestHistory checks positions, epochs, filters, expiry, idempotency,
// versions, deltas and where the keys live, on both engines.
func TestHistory(t *testing.T) {
	for name, start := range historyEngines(t) {
		t.Run(name, func(t *testing.T) {
			env := start(t)
			b := env.b
			t.Run("PositionsAndFilters", func(t *testing.T) { testPositions(t, env, "pos-"+name) })
			t.Run("Expiry", func(t *testing.T) { testExpiry(t, env, "exp-"+name) })
			t.Run("Idempotency", func(t *testing.T) { testIdempotency(t, env, "idem-"+name) })
			t.Run("Versions", func(t *testing.T) { testVersions(t, env, "ver-"+name) })
			t.Run("Delta", func(t *testing.T) { testDelta(t, env, "delta-"+name) })
			t.Run("KeyPlacement", func(t *testing.T) { testKeyPlacement(t, env, name) })
			assert.Zero(t, b.Stats().BadFrames)
		})
	}
}

func testPositions(t *testing.T, env *historyEnv, ch string) {
	b := env.b
	require.NoError(t, b.Subscribe(ch))
	var epoch string
	for i := 1; i <= 5; i++ {
		opts := withHistory(3, time.Minute)
		opts.Tags = map[string]string{"i": strconv.Itoa(i)}
		res, err := b.Publish(ch, []byte("m"+strconv.Itoa(i)), opts)
		require.NoError(t, err)
		assert.Equal(t, uint64(i), res.Offset)
		assert.False(t, res.Suppressed)
		if epoch == "" {
			epoch = res.Epoch
		}
		assert.NotEmpty(t, res.Epoch)
		assert.Equal(t, epoch, res.Epoch, "one epoch")
	}
	// Delivered in order, each with its position and the envelope's time.
	waitFor(t, func() bool { return len(env.rec.get(ch)) == 5 }, func() string { return fmt.Sprintf("%d delivered", len(env.rec.get(ch))) })
	for i, r := range env.rec.get(ch) {
		assert.Equal(t, centrifuge.StreamPosition{Offset: uint64(i + 1), Epoch: epoch}, r.sp)
		assert.Equal(t, uint64(i+1), r.pub.Offset)
		assert.Equal(t, "m"+strconv.Itoa(i+1), string(r.pub.Data))
		assert.False(t, r.delta)
		assert.InDelta(t, time.Now().UnixMilli(), r.pub.Time, float64(time.Minute.Milliseconds()))
	}

	top := centrifuge.StreamPosition{Offset: 5, Epoch: epoch}
	since := func(o uint64) *centrifuge.StreamPosition { return &centrifuge.StreamPosition{Offset: o, Epoch: epoch} }
	for _, tc := range []struct {
		name   string
		filter centrifuge.HistoryFilter
		want   []string
	}{
		{"position only", centrifuge.HistoryFilter{}, []string{}},
		{"all kept (size 3)", centrifuge.HistoryFilter{Limit: -1}, []string{"3:m3", "4:m4", "5:m5"}},
		{"limit", centrifuge.HistoryFilter{Limit: 2}, []string{"3:m3", "4:m4"}},
		{"since", centrifuge.HistoryFilter{Since: since(3), Limit: -1}, []string{"4:m4", "5:m5"}},
		{"since top", centrifuge.HistoryFilter{Since: since(5), Limit: -1}, []string{}},
		{"since the largest offset", centrifuge.HistoryFilter{Since: since(math.MaxUint64), Limit: -1}, []string{}},
		{"reverse since 0", centrifuge.HistoryFilter{Since: since(0), Limit: -1, Reverse: true}, []string{}},
		{"since with limit", centrifuge.HistoryFilter{Since: since(3), Limit: 1}, []string{"4:m4"}},
		{"reverse", centrifuge.HistoryFilter{Limit: -1, Reverse: true}, []string{"5:m5", "4:m4", "3:m3"}},
		{"reverse limit", centrifuge.HistoryFilter{Limit: 2, Reverse: true}, []string{"5:m5", "4:m4"}},
		{"reverse since", centrifuge.HistoryFilter{Since: since(5), Limit: 1, Reverse: true}, []string{"4:m4"}},
		{"reverse since the first", centrifuge.HistoryFilter{Since: since(1), Limit: -1, Reverse: true}, []string{}},
	} {
		pubs, sp, err := b.History(ch, centrifuge.HistoryOptions{Filter: tc.filter})
		require.NoError(t, err, tc.name)
		assert.Equal(t, top, sp, tc.name)
		assert.Equal(t, tc.want, datas(pubs), tc.name)
	}
	pubs, _, err := b.History(ch, centrifuge.HistoryOptions{Filter: centrifuge.HistoryFilter{Limit: 1}})
	require.NoError(t, err)
	require.Len(t, pubs, 1)
	assert.Equal(t, map[string]string{"i": "3"}, pubs[0].Tags)
	assert.NotZero(t, pubs[0].Time)

	// RemoveHistory drops the publications, not the position.
	require.NoError(t, b.RemoveHistory(ch))
	pubs, sp, err := b.History(ch, centrifuge.HistoryOptions{Filter: centrifuge.HistoryFilter{Limit: -1}})
	require.NoError(t, err)
	assert.Empty(t, pubs)
	assert.Equal(t, top, sp)
	res, err := b.Publish(ch, []byte("m6"), withHistory(3, time.Minute))
	require.NoError(t, err)
	assert.Equal(t, centrifuge.StreamPosition{Offset: 6, Epoch: epoch}, res.StreamPosition)

	// A channel that never had history gets an epoch that lasts.
	_, sp1, err := b.History(ch+"-new", centrifuge.HistoryOptions{})
	require.NoError(t, err)
	_, sp2, err := b.History(ch+"-new", centrifuge.HistoryOptions{})
	require.NoError(t, err)
	assert.Zero(t, sp1.Offset)
	assert.NotEmpty(t, sp1.Epoch)
	assert.Equal(t, sp1, sp2)
}

func testExpiry(t *testing.T, env *historyEnv, ch string) {
	b := env.b
	ctx := context.Background()
	opts := withHistory(10, 300*time.Millisecond)
	opts.HistoryMetaTTL = 600 * time.Millisecond
	first, err := b.Publish(ch, []byte("a"), opts)
	require.NoError(t, err)
	_, err = b.Publish(ch, []byte("b"), opts)
	require.NoError(t, err)
	keys := b.history.keys(ch, "")
	srv := env.serverOf(ch)
	exists := func(key string) bool {
		n, err := srv.Do(ctx, "EXISTS", key)
		return err == nil && n == int64(1)
	}
	require.True(t, exists(keys[0]) && exists(keys[1]))
	// The stream goes first, the position with its epoch later; a new
	// epoch starts at offset 1.
	waitFor(t, func() bool { return !exists(keys[0]) }, func() string { return "the stream to expire" })
	waitFor(t, func() bool { return !exists(keys[1]) }, func() string { return "the meta to expire" })
	res, err := b.Publish(ch, []byte("c"), opts)
	require.NoError(t, err)
	assert.Equal(t, uint64(1), res.Offset)
	assert.NotEqual(t, first.Epoch, res.Epoch)
	pubs, sp, err := b.History(ch, centrifuge.HistoryOptions{Filter: centrifuge.HistoryFilter{Limit: -1}})
	require.NoError(t, err)
	assert.Equal(t, []string{"1:c"}, datas(pubs))
	assert.Equal(t, res.StreamPosition, sp)
}

func testIdempotency(t *testing.T, env *historyEnv, ch string) {
	b := env.b
	require.NoError(t, b.Subscribe(ch, ch+"-plain"))
	opts := withHistory(10, time.Minute)
	opts.IdempotencyKey = "k1"
	first, err := b.Publish(ch, []byte("once"), opts)
	require.NoError(t, err)
	again, err := b.Publish(ch, []byte("twice"), opts)
	require.NoError(t, err)
	assert.True(t, again.Suppressed)
	assert.Equal(t, centrifuge.SuppressReasonIdempotency, again.SuppressReason)
	assert.Equal(t, first.StreamPosition, again.StreamPosition)
	pubs, _, err := b.History(ch, centrifuge.HistoryOptions{Filter: centrifuge.HistoryFilter{Limit: -1}})
	require.NoError(t, err)
	assert.Equal(t, []string{"1:once"}, datas(pubs))

	// Without history too, and the result is forgotten after its TTL.
	plain := centrifuge.PublishOptions{IdempotencyKey: "k1", IdempotentResultTTL: 200 * time.Millisecond}
	res, err := b.Publish(ch+"-plain", []byte("p1"), plain)
	require.NoError(t, err)
	assert.False(t, res.Suppressed)
	assert.Zero(t, res.StreamPosition)
	res, err = b.Publish(ch+"-plain", []byte("p1"), plain)
	require.NoError(t, err)
	assert.True(t, res.Suppressed)
	waitFor(t, func() bool {
		res, err := b.Publish(ch+"-plain", []byte("p2"), plain)
		return err == nil && !res.Suppressed
	}, func() string { return "the idempotent result to expire" })
	waitFor(t, func() bool { return len(env.rec.get(ch+"-plain")) == 2 && len(env.rec.get(ch)) == 1 },
		func() string {
			return fmt.Sprintf("%d and %d delivered", len(env.rec.get(ch+"-plain")), len(env.rec.get(ch)))
		})
	got := env.rec.get(ch + "-plain")
	assert.Equal(t, "p1", string(got[0].pub.Data))
	assert.Equal(t, "p2", string(got[1].pub.Data))
	assert.Zero(t, got[0].sp)
}

func testVersions(t *testing.T, env *historyEnv, ch string) {
	b := env.b
	publish := func(data string, version uint64, versionEpoch string) centrifuge.PublishResult {
		t.Helper()
		opts := withHistory(10, time.Minute)
		opts.Version, opts.VersionEpoch = version, versionEpoch
		res, err := b.Publish(ch, []byte(data), opts)
		require.NoError(t, err)
		return res
	}
	assert.False(t, publish("v2", 2, "").Suppressed)
	for _, old := range []uint64{1, 2} {
		res := publish("old", old, "")
		assert.True(t, res.Suppressed, "version %d", old)
		assert.Equal(t, centrifuge.SuppressReasonVersion, res.SuppressReason)
		assert.Equal(t, uint64(1), res.Offset, "the current position")
	}
	assert.False(t, publish("v10", 10, "").Suppressed, "10 > 2 (not as text)")
	assert.True(t, publish("old", 9, "").Suppressed)
	assert.False(t, publish("e1", 1, "other").Suppressed, "a new version epoch starts over")
	assert.True(t, publish("old", 1, "other").Suppressed)
	assert.False(t, publish("max", 18446744073709551615, "other").Suppressed)
	assert.True(t, publish("old", 18446744073709551614, "other").Suppressed, "no float rounding")
	pubs, _, err := b.History(ch, centrifuge.HistoryOptions{Filter: centrifuge.HistoryFilter{Limit: -1}})
	require.NoError(t, err)
	assert.Equal(t, []string{"1:v2", "2:v10", "3:e1", "4:max"}, datas(pubs))
	assert.Equal(t, uint64(18446744073709551615), pubs[3].Version)
}

func testDelta(t *testing.T, env *historyEnv, ch string) {
	b := env.b
	require.NoError(t, b.Subscribe(ch))
	opts := withHistory(10, time.Minute)
	opts.UseDelta = true
	for _, d := range []string{"first", "second", "third"} {
		_, err := b.Publish(ch, []byte(d), opts)
		require.NoError(t, err)
	}
	waitFor(t, func() bool { return len(env.rec.get(ch)) == 3 }, func() string { return "3 deliveries" })
	got := env.rec.get(ch)
	for i, r := range got {
		assert.True(t, r.delta)
		assert.Equal(t, uint64(i+1), r.sp.Offset)
	}
	assert.Nil(t, got[0].prev, "nothing before the first")
	require.NotNil(t, got[1].prev)
	assert.Equal(t, "first", string(got[1].prev.Data))
	require.NotNil(t, got[2].prev)
	assert.Equal(t, "second", string(got[2].prev.Data))
}

// testKeyPlacement: every key a channel's history uses is on the server
// that carries the channel and, on a cluster, in the channel's slot as
// the live server computes it.
func testKeyPlacement(t *testing.T, env *historyEnv, name string) {
	b := env.b
	ctx := context.Background()
	for i := range 20 {
		ch := fmt.Sprintf("place-%s-%d", name, i)
		opts := withHistory(10, time.Minute)
		opts.IdempotencyKey = "key-" + strconv.Itoa(i)
		_, err := b.Publish(ch, []byte("x"), opts)
		require.NoError(t, err)
		keys := b.history.keys(ch, opts.IdempotencyKey)
		require.Len(t, keys, 3)
		srv := env.serverOf(ch)
		for _, k := range keys {
			n, err := srv.Do(ctx, "EXISTS", k)
			require.NoError(t, err)
			assert.Equal(t, int64(1), n, "%s on the channel's server", k)
		}
		if want, ok := env.keySlot(ch); ok {
			slots, err := srv.KeySlots(ctx, keys...)
			require.NoError(t, err)
			for j, s := range slots {
				assert.Equal(t, want, s, "CLUSTER KEYSLOT %s", keys[j])
			}
		}
	}
}

// TestKeyNames pins the names of the history keys and the channel a script
// publishes to: a cluster's keys are Layout.PartitionKey of the channel's
// partition, and the wire channel is the engine's WireChannel.
func TestKeyNames(t *testing.T) {
	node, err := centrifuge.New(centrifuge.Config{LogLevel: centrifuge.LogLevelNone,
		Metrics: centrifuge.MetricsConfig{RegistererGatherer: prometheus.NewRegistry()}})
	require.NoError(t, err)
	b, err := New(node, Config{KeyPrefix: "kp.", Cluster: &cluster.Config{Addrs: redistest.OnDemandCluster(), Prefix: "app."}})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, b.Close(context.Background())) })
	c := b.engine.(*cluster.Broker)
	l := c.Layout()
	for i := range 50 {
		ch := "names:" + strconv.Itoa(i) + strings.Repeat("x", i)
		key := func(name string) string { return l.PartitionKey(l.Partition(ch), name) }
		assert.Equal(t, []string{key("kp.history.stream." + ch), key("kp.history.meta." + ch)}, b.history.keys(ch, ""))
		assert.Equal(t, []string{key("kp.history.stream." + ch), key("kp.history.meta." + ch),
			key("kp.result." + strconv.Itoa(len(ch)) + "." + ch + ".idem")}, b.history.keys(ch, "idem"))
		a := getScriptArgs()
		b.history.addWire(a, b.history.place(ch), ch)
		assert.Equal(t, []string{c.WireChannel(ch)}, a.strings())
		a.release()
	}
}
