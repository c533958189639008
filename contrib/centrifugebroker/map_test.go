package centrifugebroker

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
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

// Map channels in the tests take their mode from their name's start.
const (
	mapRecoverable = "rec-"
	mapPersistent  = "per-"
	mapEphemeral   = "eph-"
	// Keys that expire soon.
	mapShort          = "short-"
	mapShortEphemeral = "sheph-"
	mapShortTTL       = 300 * time.Millisecond
	// A meta (with the epoch) that expires soon.
	mapBrief = "brief-"
	// Keys, stream and meta that all lapse after mapLapseTTL without a
	// write: the keys last as long as the meta may.
	mapLapse    = "lapse-"
	mapLapseTTL = 3 * time.Second
)

func mapChannelOptions(ch string) centrifuge.MapChannelOptions {
	switch {
	case strings.HasPrefix(ch, mapPersistent):
		return centrifuge.MapChannelOptions{Mode: centrifuge.MapModePersistent}
	case strings.HasPrefix(ch, mapEphemeral):
		return centrifuge.MapChannelOptions{Mode: centrifuge.MapModeEphemeral, KeyTTL: time.Hour}
	case strings.HasPrefix(ch, mapShort):
		return centrifuge.MapChannelOptions{Mode: centrifuge.MapModeRecoverable, KeyTTL: mapShortTTL, MetaTTL: time.Hour}
	case strings.HasPrefix(ch, mapBrief):
		return centrifuge.MapChannelOptions{Mode: centrifuge.MapModeRecoverable, KeyTTL: mapShortTTL,
			StreamTTL: mapShortTTL, MetaTTL: 2 * mapShortTTL}
	case strings.HasPrefix(ch, mapLapse):
		return centrifuge.MapChannelOptions{Mode: centrifuge.MapModeRecoverable, KeyTTL: mapLapseTTL,
			StreamTTL: mapLapseTTL, MetaTTL: mapLapseTTL}
	case strings.HasPrefix(ch, mapShortEphemeral):
		return centrifuge.MapChannelOptions{Mode: centrifuge.MapModeEphemeral, KeyTTL: mapShortTTL}
	case strings.HasPrefix(ch, mapRecoverable):
		return centrifuge.MapChannelOptions{Mode: centrifuge.MapModeRecoverable, KeyTTL: time.Hour}
	}
	return centrifuge.MapChannelOptions{} // not a map channel: an error
}

// mapNode is a Broker and its MapBroker on one engine, as one node has
// them, with the map publications it receives recorded.
type mapNode struct {
	b   *Broker
	m   *MapBroker
	rec *recorder
}

func newMapNode(t *testing.T, cfg Config, mcfg MapConfig) *mapNode {
	t.Helper()
	node, err := centrifuge.New(centrifuge.Config{
		LogLevel: centrifuge.LogLevelNone,
		Metrics:  centrifuge.MetricsConfig{RegistererGatherer: prometheus.NewRegistry()},
		Map:      centrifuge.MapConfig{GetMapChannelOptions: mapChannelOptions},
	})
	require.NoError(t, err)
	b, err := New(node, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, b.Close(context.Background())) })
	m, err := NewMapBroker(b, mcfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, m.Close(context.Background())) })
	rec := &recorder{pubs: make(map[string][]received)}
	require.NoError(t, m.RegisterEventHandler(rec))
	return &mapNode{b: b, m: m, rec: rec}
}

// mapEnv is two nodes on one engine and the Redis server of a channel.
type mapEnv struct {
	cfg      Config
	a, b     *mapNode
	serverOf func(ch string) *redistest.Server
	restart  func(ctx context.Context, s *redistest.Server) error
}

// mapEngines starts, for each engine, a 3-master cluster or two
// standalone instances, and two nodes on it.
func mapEngines() map[string]func(t *testing.T, opts ...redistest.Option) *mapEnv {
	return map[string]func(t *testing.T, opts ...redistest.Option) *mapEnv{
		"cluster": func(t *testing.T, opts ...redistest.Option) *mapEnv {
			c := redistest.StartCluster(t, 3, 0, opts...)
			env := &mapEnv{cfg: Config{Cluster: &cluster.Config{Addrs: c.Seeds()}, CallTimeout: 3 * time.Second}}
			env.a, env.b = newMapNode(t, env.cfg, MapConfig{}), newMapNode(t, env.cfg, MapConfig{})
			env.serverOf = func(ch string) *redistest.Server {
				l := env.a.b.engine.(*cluster.Broker).Layout()
				ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
				defer cancel()
				s, err := c.MasterOfSlot(ctx, l.Slot(l.Partition(env.a.m.wire(ch))))
				require.NoError(t, err)
				return s
			}
			env.restart = c.RestartNode
			return env
		},
		"sharded": func(t *testing.T, opts ...redistest.Option) *mapEnv {
			servers := []*redistest.Server{redistest.StartStandalone(t, opts...), redistest.StartStandalone(t, opts...)}
			env := &mapEnv{cfg: Config{Sharded: &sharded.Config{Addrs: []string{servers[0].Addr(), servers[1].Addr()}}, CallTimeout: 3 * time.Second}}
			env.a, env.b = newMapNode(t, env.cfg, MapConfig{}), newMapNode(t, env.cfg, MapConfig{})
			env.serverOf = func(ch string) *redistest.Server {
				return servers[env.a.b.engine.(*sharded.Broker).Shard(env.a.m.wire(ch))]
			}
			env.restart = func(ctx context.Context, s *redistest.Server) error { return s.Restart(ctx) }
			return env
		},
	}
}

// TestMap checks every MapBroker method on both engines.
func TestMap(t *testing.T) {
	for name, start := range mapEngines() {
		t.Run(name, func(t *testing.T) {
			env := start(t)
			t.Run("KeyModes", func(t *testing.T) { testMapKeyModes(t, env.a.m, mapRecoverable+"modes") })
			t.Run("Persistent", func(t *testing.T) { testMapKeyModes(t, env.a.m, mapPersistent+"modes") })
			t.Run("Idempotency", func(t *testing.T) { testMapIdempotency(t, env.a.m, mapRecoverable+"idem") })
			t.Run("Versions", func(t *testing.T) { testMapVersions(t, env.a.m, mapRecoverable+"ver") })
			t.Run("CAS", func(t *testing.T) { testMapCAS(t, env.a.m, mapRecoverable+"cas") })
			t.Run("Pagination", func(t *testing.T) { testMapPagination(t, env, mapRecoverable+"pages") })
			t.Run("Stream", func(t *testing.T) { testMapStream(t, env.a.m, mapRecoverable+"stream") })
			t.Run("Ephemeral", func(t *testing.T) { testMapEphemeral(t, env.a.m, mapEphemeral+"e") })
			t.Run("Clear", func(t *testing.T) { testMapClear(t, env.a.m, mapRecoverable+"clear") })
			t.Run("Live", func(t *testing.T) { testMapLive(t, env, mapRecoverable+"live") })
			t.Run("LiveEphemeral", func(t *testing.T) { testMapLive(t, env, mapEphemeral+"live") })
			t.Run("Expiry", func(t *testing.T) { testMapExpiry(t, env, mapShort+"exp") })
			t.Run("ExpiryEphemeral", func(t *testing.T) { testMapExpiry(t, env, mapShortEphemeral+"exp") })
			t.Run("EpochAfterMetaExpiry", func(t *testing.T) { testMapEpochExpiry(t, env, mapBrief+"epoch") })
			t.Run("Reserved", func(t *testing.T) { testMapReserved(t, env) })
		})
	}
}

var bg = context.Background()

func publish(t *testing.T, m *MapBroker, ch, key, data string, opts centrifuge.MapPublishOptions) centrifuge.MapUpdateResult {
	t.Helper()
	opts.Data = []byte(data)
	r, err := m.Publish(bg, ch, key, opts)
	require.NoError(t, err)
	return r
}

// state returns ch's entries as key → "offset:data", and the position.
func state(t *testing.T, m *MapBroker, ch string) (map[string]string, centrifuge.StreamPosition) {
	t.Helper()
	r, err := m.ReadState(bg, ch, centrifuge.MapReadStateOptions{Limit: -1})
	require.NoError(t, err)
	out := make(map[string]string, len(r.Publications))
	for _, p := range r.Publications {
		out[p.Key] = fmt.Sprintf("%d:%s", p.Offset, p.Data)
	}
	assert.Empty(t, r.Cursor)
	return out, r.Position
}

// stream returns ch's whole stream as "offset:key:data" or
// "offset:key:removed".
func stream(t *testing.T, m *MapBroker, ch string) ([]string, centrifuge.StreamPosition) {
	t.Helper()
	r, err := m.ReadStream(bg, ch, centrifuge.MapReadStreamOptions{Filter: centrifuge.StreamFilter{Limit: -1}})
	require.NoError(t, err)
	return streamLines(r.Publications), r.Position
}

func streamLines(pubs []*centrifuge.Publication) []string {
	out := make([]string, len(pubs))
	for i, p := range pubs {
		if p.Removed {
			out[i] = fmt.Sprintf("%d:%s:removed", p.Offset, p.Key)
		} else {
			out[i] = fmt.Sprintf("%d:%s:%s", p.Offset, p.Key, p.Data)
		}
	}
	return out
}

func suppressed(reason centrifuge.SuppressReason) func(t *testing.T, r centrifuge.MapUpdateResult) {
	return func(t *testing.T, r centrifuge.MapUpdateResult) {
		t.Helper()
		assert.True(t, r.Suppressed, "suppressed")
		assert.Equal(t, reason, r.SuppressReason)
	}
}

// testMapKeyModes: replace, if-new and if-exists set keys or are
// suppressed without a stream entry; Remove removes, or says the key is
// not there; offsets are contiguous under one epoch; Stats counts keys.
func testMapKeyModes(t *testing.T, m *MapBroker, ch string) {
	r1 := publish(t, m, ch, "a", "a1", centrifuge.MapPublishOptions{})
	require.False(t, r1.Suppressed)
	require.NotEmpty(t, r1.Position.Epoch)
	epoch := r1.Position.Epoch
	assert.Equal(t, centrifuge.StreamPosition{Offset: 1, Epoch: epoch}, r1.Position)
	assert.Equal(t, uint64(2), publish(t, m, ch, "a", "a2", centrifuge.MapPublishOptions{}).Position.Offset, "replace")

	r := publish(t, m, ch, "a", "a3", centrifuge.MapPublishOptions{KeyMode: centrifuge.KeyModeIfNew})
	suppressed(centrifuge.SuppressReasonKeyExists)(t, r)
	assert.Equal(t, centrifuge.StreamPosition{Offset: 2, Epoch: epoch}, r.Position)
	assert.False(t, publish(t, m, ch, "b", "b1", centrifuge.MapPublishOptions{KeyMode: centrifuge.KeyModeIfNew}).Suppressed)
	suppressed(centrifuge.SuppressReasonKeyNotFound)(t, publish(t, m, ch, "c", "c1", centrifuge.MapPublishOptions{KeyMode: centrifuge.KeyModeIfExists}))
	assert.False(t, publish(t, m, ch, "b", "b2", centrifuge.MapPublishOptions{KeyMode: centrifuge.KeyModeIfExists}).Suppressed)

	s, sp := state(t, m, ch)
	assert.Equal(t, map[string]string{"a": "2:a2", "b": "4:b2"}, s)
	assert.Equal(t, centrifuge.StreamPosition{Offset: 4, Epoch: epoch}, sp)
	st, err := m.Stats(bg, ch)
	require.NoError(t, err)
	assert.Equal(t, 2, st.NumKeys)

	rr, err := m.Remove(bg, ch, "a", centrifuge.MapRemoveOptions{})
	require.NoError(t, err)
	assert.Equal(t, centrifuge.MapUpdateResult{Position: centrifuge.StreamPosition{Offset: 5, Epoch: epoch}}, rr)
	rr, err = m.Remove(bg, ch, "a", centrifuge.MapRemoveOptions{})
	require.NoError(t, err)
	suppressed(centrifuge.SuppressReasonKeyNotFound)(t, rr)
	s, _ = state(t, m, ch)
	assert.Equal(t, map[string]string{"b": "4:b2"}, s)

	lines, sp := stream(t, m, ch)
	assert.Equal(t, []string{"1:a:a1", "2:a:a2", "3:b:b1", "4:b:b2", "5:a:removed"}, lines)
	assert.Equal(t, centrifuge.StreamPosition{Offset: 5, Epoch: epoch}, sp)
	_, err = m.Remove(bg, ch, "", centrifuge.MapRemoveOptions{})
	assert.ErrorIs(t, err, centrifuge.ErrorBadRequest)
	_, err = m.Publish(bg, ch, "a", centrifuge.MapPublishOptions{KeyMode: "sometimes"})
	assert.ErrorIs(t, err, centrifuge.ErrorBadRequest)
	_, err = m.Publish(bg, "unknown-mode", "a", centrifuge.MapPublishOptions{})
	assert.Error(t, err, "a channel without map options")
}

// testMapIdempotency: a repeated IdempotencyKey gets the first call's
// result and writes nothing, until its result TTL runs out.
func testMapIdempotency(t *testing.T, m *MapBroker, ch string) {
	first := publish(t, m, ch, "k", "v1", centrifuge.MapPublishOptions{IdempotencyKey: "x", IdempotentResultTTL: time.Hour})
	require.False(t, first.Suppressed)
	again := publish(t, m, ch, "k", "v2", centrifuge.MapPublishOptions{IdempotencyKey: "x", IdempotentResultTTL: time.Hour})
	suppressed(centrifuge.SuppressReasonIdempotency)(t, again)
	assert.Equal(t, first.Position, again.Position)
	s, _ := state(t, m, ch)
	assert.Equal(t, map[string]string{"k": "1:v1"}, s)

	rm, err := m.Remove(bg, ch, "k", centrifuge.MapRemoveOptions{IdempotencyKey: "r"})
	require.NoError(t, err)
	require.False(t, rm.Suppressed)
	rm2, err := m.Remove(bg, ch, "k", centrifuge.MapRemoveOptions{IdempotencyKey: "r"})
	require.NoError(t, err)
	suppressed(centrifuge.SuppressReasonIdempotency)(t, rm2)
	assert.Equal(t, rm.Position, rm2.Position)

	short := publish(t, m, ch, "s", "s1", centrifuge.MapPublishOptions{IdempotencyKey: "y", IdempotentResultTTL: 50 * time.Millisecond})
	require.False(t, short.Suppressed)
	var r centrifuge.MapUpdateResult
	waitFor(t, func() bool {
		r = publish(t, m, ch, "s", "s2", centrifuge.MapPublishOptions{IdempotencyKey: "y", IdempotentResultTTL: time.Hour})
		return !r.Suppressed
	}, func() string { return "the idempotent result to expire" })
	assert.Equal(t, short.Position.Offset+1, r.Position.Offset)
}

// testMapVersions: a key's version must grow within its version epoch; a
// new version epoch starts over; keys are independent.
func testMapVersions(t *testing.T, m *MapBroker, ch string) {
	v := func(key string, version uint64, vepoch string) centrifuge.MapUpdateResult {
		return publish(t, m, ch, key, fmt.Sprintf("%s@%d%s", key, version, vepoch), centrifuge.MapPublishOptions{Version: version, VersionEpoch: vepoch})
	}
	assert.False(t, v("a", 2, "").Suppressed)
	suppressed(centrifuge.SuppressReasonVersion)(t, v("a", 1, ""))
	suppressed(centrifuge.SuppressReasonVersion)(t, v("a", 2, ""))
	assert.False(t, v("a", 3, "").Suppressed)
	assert.False(t, v("b", 1, "").Suppressed, "another key")
	assert.False(t, v("a", 1, "e2").Suppressed, "another version epoch")
	suppressed(centrifuge.SuppressReasonVersion)(t, v("a", 1, "e2"))
	// Versions past 2^53 compare exactly.
	assert.False(t, v("c", 1<<60+1, "").Suppressed)
	suppressed(centrifuge.SuppressReasonVersion)(t, v("c", 1<<60, ""))
	s, _ := state(t, m, ch)
	assert.Equal(t, map[string]string{"a": "4:a@1e2", "b": "3:b@1", "c": "5:c@1152921504606846977"}, s)
	_, err := m.Publish(bg, ch, "", centrifuge.MapPublishOptions{Version: 1})
	assert.ErrorIs(t, err, centrifuge.ErrorBadRequest, "a version without a key")
}

// testMapCAS: ExpectedPosition writes only at the key's current position
// and epoch; a mismatch returns the current entry.
func testMapCAS(t *testing.T, m *MapBroker, ch string) {
	r := publish(t, m, ch, "k", "v1", centrifuge.MapPublishOptions{})
	epoch := r.Position.Epoch
	ok := publish(t, m, ch, "k", "v2", centrifuge.MapPublishOptions{ExpectedPosition: &centrifuge.StreamPosition{Offset: 1, Epoch: epoch}})
	assert.False(t, ok.Suppressed)
	stale := publish(t, m, ch, "k", "v3", centrifuge.MapPublishOptions{ExpectedPosition: &centrifuge.StreamPosition{Offset: 1, Epoch: epoch}})
	suppressed(centrifuge.SuppressReasonPositionMismatch)(t, stale)
	assert.Equal(t, &centrifuge.MapCurrentEntry{Offset: 2, Data: []byte("v2")}, stale.CurrentEntry)
	other := publish(t, m, ch, "k", "v3", centrifuge.MapPublishOptions{ExpectedPosition: &centrifuge.StreamPosition{Offset: 2, Epoch: "other"}})
	suppressed(centrifuge.SuppressReasonPositionMismatch)(t, other)
	missing := publish(t, m, ch, "nokey", "v", centrifuge.MapPublishOptions{ExpectedPosition: &centrifuge.StreamPosition{Offset: 2, Epoch: epoch}})
	suppressed(centrifuge.SuppressReasonPositionMismatch)(t, missing)
	assert.Nil(t, missing.CurrentEntry)

	rm, err := m.Remove(bg, ch, "k", centrifuge.MapRemoveOptions{ExpectedPosition: &centrifuge.StreamPosition{Offset: 1, Epoch: epoch}})
	require.NoError(t, err)
	suppressed(centrifuge.SuppressReasonPositionMismatch)(t, rm)
	rm, err = m.Remove(bg, ch, "k", centrifuge.MapRemoveOptions{ExpectedPosition: &centrifuge.StreamPosition{Offset: 2, Epoch: epoch}})
	require.NoError(t, err)
	assert.False(t, rm.Suppressed)
	s, _ := state(t, m, ch)
	assert.Empty(t, s)
}

// testMapPagination: pages from a cursor cover every key, each page at
// the stream position of its read; Limit 0 reads only the position; Key
// reads one entry; a Revision of another epoch is unrecoverable.
func testMapPagination(t *testing.T, env *mapEnv, ch string) {
	m := env.a.m
	// Beyond a listpack, which HSCAN returns whole, so that it pages.
	v, err := env.serverOf(ch).Do(bg, "CONFIG", "GET", "hash-max-listpack-entries")
	require.NoError(t, err)
	listpack, err := strconv.Atoi(v.([]any)[1].(string))
	require.NoError(t, err)
	n := listpack + 100
	want := make(map[string]string, n)
	var last centrifuge.MapUpdateResult
	for i := range n {
		k := fmt.Sprintf("key%03d", i)
		last = publish(t, m, ch, k, "v"+k, centrifuge.MapPublishOptions{})
		want[k] = "v" + k
	}
	got := make(map[string]string, n)
	cursor, pages := "", 0
	for {
		r, err := m.ReadState(bg, ch, centrifuge.MapReadStateOptions{Cursor: cursor, Limit: 50, Revision: &last.Position})
		require.NoError(t, err)
		assert.Equal(t, last.Position, r.Position)
		for _, p := range r.Publications {
			got[p.Key] = string(p.Data)
		}
		pages++
		if cursor = r.Cursor; cursor == "" {
			break
		}
		require.Less(t, pages, n, "the cursor must come to an end")
	}
	assert.Equal(t, want, got)
	assert.Greater(t, pages, 1, "more than one page")

	r, err := m.ReadState(bg, ch, centrifuge.MapReadStateOptions{Limit: 0})
	require.NoError(t, err)
	assert.Empty(t, r.Publications)
	assert.Empty(t, r.Cursor)
	assert.Equal(t, last.Position, r.Position)

	r, err = m.ReadState(bg, ch, centrifuge.MapReadStateOptions{Key: "key007"})
	require.NoError(t, err)
	require.Len(t, r.Publications, 1)
	assert.Equal(t, "vkey007", string(r.Publications[0].Data))
	assert.Equal(t, uint64(8), r.Publications[0].Offset)
	r, err = m.ReadState(bg, ch, centrifuge.MapReadStateOptions{Key: "absent"})
	require.NoError(t, err)
	assert.Empty(t, r.Publications)

	_, err = m.ReadState(bg, ch, centrifuge.MapReadStateOptions{Limit: 10, Revision: &centrifuge.StreamPosition{Offset: 1, Epoch: "gone"}})
	assert.ErrorIs(t, err, centrifuge.ErrorUnrecoverablePosition)
}

// testMapStream: Since, Limit (0, -1, n) and Reverse select from the
// stream; Since of another epoch is unrecoverable.
func testMapStream(t *testing.T, m *MapBroker, ch string) {
	var epoch string
	for i := 1; i <= 5; i++ {
		epoch = publish(t, m, ch, fmt.Sprintf("k%d", i), fmt.Sprint(i), centrifuge.MapPublishOptions{}).Position.Epoch
	}
	read := func(f centrifuge.StreamFilter) []string {
		t.Helper()
		r, err := m.ReadStream(bg, ch, centrifuge.MapReadStreamOptions{Filter: f})
		require.NoError(t, err)
		assert.Equal(t, centrifuge.StreamPosition{Offset: 5, Epoch: epoch}, r.Position)
		return streamLines(r.Publications)
	}
	at := func(o uint64) *centrifuge.StreamPosition { return &centrifuge.StreamPosition{Offset: o, Epoch: epoch} }
	assert.Empty(t, read(centrifuge.StreamFilter{Limit: 0}))
	assert.Equal(t, []string{"1:k1:1", "2:k2:2", "3:k3:3", "4:k4:4", "5:k5:5"}, read(centrifuge.StreamFilter{Limit: -1}))
	assert.Equal(t, []string{"1:k1:1", "2:k2:2"}, read(centrifuge.StreamFilter{Limit: 2}))
	assert.Equal(t, []string{"4:k4:4", "5:k5:5"}, read(centrifuge.StreamFilter{Since: at(3), Limit: -1}))
	assert.Equal(t, []string{"4:k4:4"}, read(centrifuge.StreamFilter{Since: at(3), Limit: 1}))
	assert.Empty(t, read(centrifuge.StreamFilter{Since: at(5), Limit: -1}))
	assert.Equal(t, []string{"5:k5:5", "4:k4:4"}, read(centrifuge.StreamFilter{Reverse: true, Limit: 2}))
	assert.Equal(t, []string{"2:k2:2", "1:k1:1"}, read(centrifuge.StreamFilter{Since: at(3), Reverse: true, Limit: -1}))
	assert.Empty(t, read(centrifuge.StreamFilter{Since: at(1), Reverse: true, Limit: -1}))
	_, err := m.ReadStream(bg, ch, centrifuge.MapReadStreamOptions{Filter: centrifuge.StreamFilter{Since: &centrifuge.StreamPosition{Offset: 2, Epoch: "old"}, Limit: -1}})
	assert.ErrorIs(t, err, centrifuge.ErrorUnrecoverablePosition)
}

// testMapEphemeral: an ephemeral channel keeps state without stream,
// epoch or offsets, and refuses what needs a stream.
func testMapEphemeral(t *testing.T, m *MapBroker, ch string) {
	r := publish(t, m, ch, "a", "a1", centrifuge.MapPublishOptions{})
	assert.Equal(t, centrifuge.MapUpdateResult{}, r)
	suppressed(centrifuge.SuppressReasonKeyExists)(t, publish(t, m, ch, "a", "a2", centrifuge.MapPublishOptions{KeyMode: centrifuge.KeyModeIfNew}))
	s, sp := state(t, m, ch)
	assert.Equal(t, map[string]string{"a": "0:a1"}, s)
	assert.Equal(t, centrifuge.StreamPosition{}, sp)
	lines, sp := stream(t, m, ch)
	assert.Empty(t, lines)
	assert.Equal(t, centrifuge.StreamPosition{}, sp)
	_, err := m.Publish(bg, ch, "a", centrifuge.MapPublishOptions{Version: 1})
	assert.ErrorIs(t, err, centrifuge.ErrorBadRequest)
	_, err = m.Publish(bg, ch, "a", centrifuge.MapPublishOptions{ExpectedPosition: &centrifuge.StreamPosition{}})
	assert.ErrorIs(t, err, centrifuge.ErrorBadRequest)
	rm, err := m.Remove(bg, ch, "a", centrifuge.MapRemoveOptions{})
	require.NoError(t, err)
	assert.False(t, rm.Suppressed)
	s, _ = state(t, m, ch)
	assert.Empty(t, s)
}

// testMapClear: Clear removes state and stream, and the channel starts a
// new epoch.
func testMapClear(t *testing.T, m *MapBroker, ch string) {
	r := publish(t, m, ch, "a", "a1", centrifuge.MapPublishOptions{})
	require.NoError(t, m.Clear(bg, ch, centrifuge.MapClearOptions{}))
	s, sp := state(t, m, ch)
	assert.Empty(t, s)
	assert.Equal(t, uint64(0), sp.Offset)
	assert.NotEqual(t, r.Position.Epoch, sp.Epoch, "a new epoch")
	_, err := m.ReadState(bg, ch, centrifuge.MapReadStateOptions{Limit: -1, Revision: &r.Position})
	assert.ErrorIs(t, err, centrifuge.ErrorUnrecoverablePosition)
	assert.Equal(t, uint64(1), publish(t, m, ch, "b", "b1", centrifuge.MapPublishOptions{}).Position.Offset)
}

// testMapLive: a node subscribed to a map channel receives, through the
// engine's subscription, every publication another node makes, in order,
// with its stream position, a delta with the key's previous value, and
// removals with the removed entry's tags.
func testMapLive(t *testing.T, env *mapEnv, ch string) {
	require.NoError(t, env.b.m.Subscribe(ch))
	t.Cleanup(func() { _ = env.b.m.Unsubscribe(ch) })
	tags := map[string]string{"team": "red"}
	r1 := publish(t, env.a.m, ch, "k", "v1", centrifuge.MapPublishOptions{Tags: tags})
	r2 := publish(t, env.a.m, ch, "k", "v2", centrifuge.MapPublishOptions{Tags: tags, UseDelta: true})
	rm, err := env.a.m.Remove(bg, ch, "k", centrifuge.MapRemoveOptions{})
	require.NoError(t, err)
	var got []received
	waitFor(t, func() bool { got = env.b.rec.get(ch); return len(got) >= 3 },
		func() string { return fmt.Sprintf("3 publications on node b, got %d", len(got)) })
	require.Len(t, got, 3)
	assert.Equal(t, "v1", string(got[0].pub.Data))
	assert.Equal(t, r1.Position, got[0].sp)
	assert.False(t, got[0].delta)
	assert.Equal(t, "k", got[0].pub.Key)
	assert.Equal(t, tags, got[0].pub.Tags)
	assert.Equal(t, "v2", string(got[1].pub.Data))
	assert.Equal(t, r2.Position, got[1].sp)
	assert.True(t, got[1].delta)
	require.NotNil(t, got[1].prev)
	assert.Equal(t, "v1", string(got[1].prev.Data))
	assert.True(t, got[2].pub.Removed)
	assert.Equal(t, "k", got[2].pub.Key)
	assert.Equal(t, tags, got[2].pub.Tags, "a removal carries the entry's tags")
	assert.Equal(t, rm.Position, got[2].sp)
	assert.Positive(t, got[2].pub.Time)
	if r1.Position.Epoch != "" {
		assert.Equal(t, []uint64{1, 2, 3}, []uint64{got[0].pub.Offset, got[1].pub.Offset, got[2].pub.Offset})
	}
	assert.Empty(t, env.a.rec.get(ch), "node a is not subscribed")
}

// testMapExpiry: an entry expires KeyTTL after its last write: the
// sweeper of a subscribed node removes it and publishes its removal, which
// a recoverable channel appends to its stream; RefreshTTLOnSuppress
// keeps an entry.
func testMapExpiry(t *testing.T, env *mapEnv, ch string) {
	require.NoError(t, env.b.m.Subscribe(ch))
	t.Cleanup(func() { _ = env.b.m.Unsubscribe(ch) })
	publish(t, env.a.m, ch, "gone", "g", centrifuge.MapPublishOptions{})
	var got []received
	waitFor(t, func() bool {
		got = env.b.rec.get(ch)
		return len(got) >= 2
	}, func() string { return fmt.Sprintf("the removal of the expired key, got %d publications", len(got)) })
	assert.True(t, got[1].pub.Removed)
	assert.Equal(t, "gone", got[1].pub.Key)
	s, _ := state(t, env.a.m, ch)
	assert.Empty(t, s)
	if mapChannelOptions(ch).Mode.HasStream() {
		assert.Equal(t, got[1].sp.Offset, got[0].sp.Offset+1)
		lines, _ := stream(t, env.a.m, ch)
		assert.Equal(t, []string{"1:gone:g", "2:gone:removed"}, lines)
		assert.Equal(t, got[0].sp.Epoch, got[1].sp.Epoch)
	}

	// Refreshed on every suppressed if-new publish, an entry outlives
	// many TTLs; left alone, it expires.
	publish(t, env.a.m, ch, "kept", "k", centrifuge.MapPublishOptions{})
	deadline := time.Now().Add(4 * mapShortTTL)
	for time.Now().Before(deadline) {
		suppressed(centrifuge.SuppressReasonKeyExists)(t, publish(t, env.a.m, ch, "kept", "k2",
			centrifuge.MapPublishOptions{KeyMode: centrifuge.KeyModeIfNew, RefreshTTLOnSuppress: true}))
	}
	waitFor(t, func() bool { s, _ = state(t, env.a.m, ch); return len(s) == 0 },
		func() string { return fmt.Sprintf("the kept entry to expire once no longer refreshed: %v", s) })
}

// testMapEpochExpiry: once a recoverable channel's meta expires (MetaTTL
// without a call), its next call starts a new epoch with empty state, and
// positions of the old one are unrecoverable.
func testMapEpochExpiry(t *testing.T, env *mapEnv, ch string) {
	r := publish(t, env.a.m, ch, "k", "v", centrifuge.MapPublishOptions{})
	meta := mapKeyNames(t, env.a.m, ch)[0]
	srv := env.serverOf(ch)
	waitFor(t, func() bool {
		v, err := srv.Do(bg, "EXISTS", meta)
		return err == nil && v == int64(0)
	}, func() string { return "the meta to expire" })
	_, err := env.a.m.ReadState(bg, ch, centrifuge.MapReadStateOptions{Limit: -1, Revision: &r.Position})
	assert.ErrorIs(t, err, centrifuge.ErrorUnrecoverablePosition)
	_, err = env.a.m.ReadStream(bg, ch, centrifuge.MapReadStreamOptions{Filter: centrifuge.StreamFilter{Since: &r.Position, Limit: -1}})
	assert.ErrorIs(t, err, centrifuge.ErrorUnrecoverablePosition)
	s, sp := state(t, env.a.m, ch)
	assert.Empty(t, s)
	assert.NotEqual(t, r.Position.Epoch, sp.Epoch)
	assert.Equal(t, uint64(1), publish(t, env.a.m, ch, "k", "v", centrifuge.MapPublishOptions{}).Position.Offset)
}

// mapKeyNames returns the keys of map channel ch: meta, stream, state,
// expiry, versions.
func mapKeyNames(t *testing.T, m *MapBroker, ch string) []string {
	t.Helper()
	o, err := m.channelOptions(ch)
	require.NoError(t, err)
	c := m.call(ch, o, "")
	defer c.a.release()
	return slices.Clone(c.a.strings()[:5])
}

// testMapReserved: the Broker refuses the channels that carry map
// channels, and a second MapBroker on one Broker.
func testMapReserved(t *testing.T, env *mapEnv) {
	assert.ErrorIs(t, env.a.b.Subscribe(DefaultMapChannelPrefix+"x"), ErrReservedChannel)
	_, err := env.a.b.Publish(DefaultMapChannelPrefix+"x", []byte("x"), centrifuge.PublishOptions{})
	assert.ErrorIs(t, err, ErrReservedChannel)
	_, err = NewMapBroker(env.a.b, MapConfig{})
	assert.ErrorIs(t, err, shardcast.ErrInvalidConfig)
}
