package centrifugebroker

import (
	"context"
	"fmt"
	"maps"
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

// newPresence returns a PresenceManager of b with cfg, failing the test
// on error.
func newPresence(t *testing.T, b *Broker, cfg PresenceConfig) *PresenceManager {
	t.Helper()
	m, err := NewPresenceManager(b, cfg)
	require.NoError(t, err)
	return m
}

// clientInfo is the ClientInfo of client c of user u, with connection and
// channel info so that round trips show them.
func clientInfo(c, u string) *centrifuge.ClientInfo {
	return &centrifuge.ClientInfo{ClientID: c, UserID: u, ConnInfo: []byte(`{"conn":"` + c + `"}`), ChanInfo: []byte(`{"chan":"` + u + `"}`)}
}

// mapPrefix starts the channels whose presence counts users in the tests.
const mapPrefix = "mapped-"

func mapped(ch string) bool { return strings.HasPrefix(ch, mapPrefix) }

// presentClients returns the client IDs present in ch, sorted.
func presentClients(t *testing.T, m *PresenceManager, ch string) []string {
	t.Helper()
	p, err := m.Presence(ch)
	require.NoError(t, err)
	return slices.Sorted(maps.Keys(p))
}

func stats(t *testing.T, m *PresenceManager, ch string) centrifuge.PresenceStats {
	t.Helper()
	s, err := m.PresenceStats(ch)
	require.NoError(t, err)
	return s
}

// TestPresence checks every PresenceManager method, user mapping, expiry
// and where the keys live, on both engines, with expiry kept in a sorted
// set and, where the server has per-field expiry, with FieldTTL; where
// it has not, that FieldTTL fails with ErrNotSupported.
func TestPresence(t *testing.T) {
	for name, start := range historyEngines(t) {
		t.Run(name, func(t *testing.T) {
			env := start(t)
			for _, fieldTTL := range []bool{false, true} {
				mode := "ZSet"
				if fieldTTL {
					mode = "FieldTTL"
				}
				t.Run(mode, func(t *testing.T) {
					cfg := PresenceConfig{UserMapping: mapped, FieldTTL: fieldTTL}
					m := newPresence(t, env.b, cfg)
					if fieldTTL && !hasFieldTTL(t, env.serverOf("probe")) {
						err := m.AddPresence("pres-"+name, "c", clientInfo("c", "u"))
						require.ErrorIs(t, err, ErrNotSupported)
						t.Skipf("the server has no HPEXPIRE; FieldTTL fails as it should: %v", err)
					}
					tag := name + "-" + mode
					for _, ch := range []string{"pres-" + tag, mapPrefix + "pres-" + tag} {
						t.Run("Methods/"+ch, func(t *testing.T) { testPresenceMethods(t, m, ch) })
					}
					t.Run("UserMapping", func(t *testing.T) { testUserMapping(t, m, mapPrefix+"users-"+tag) })
					t.Run("Expiry", func(t *testing.T) { testPresenceExpiry(t, env, cfg, mapPrefix+"exp-"+tag) })
					if !fieldTTL {
						t.Run("AddSweeps", func(t *testing.T) { testPresenceAddSweeps(t, env, mapPrefix+"sweep-"+tag) })
					}
					t.Run("KeyPlacement", func(t *testing.T) { testPresenceKeyPlacement(t, env, m, tag) })
				})
			}
		})
	}
}

// hasFieldTTL reports whether s has per-field expiry (HPEXPIRE).
func hasFieldTTL(t *testing.T, s *redistest.Server) bool {
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	v, err := s.Do(ctx, "COMMAND", "INFO", "hpexpire")
	require.NoError(t, err)
	info, ok := v.([]any)
	require.True(t, ok && len(info) == 1, "COMMAND INFO replied %v", v)
	return info[0] != nil
}

// testPresenceMethods: entries added are returned whole, re-adding updates
// one in place, removing removes it, and the stats count clients and
// unique users whether or not the channel maps users.
func testPresenceMethods(t *testing.T, m *PresenceManager, ch string) {
	empty, err := m.Presence(ch)
	require.NoError(t, err)
	assert.Empty(t, empty)
	assert.Equal(t, centrifuge.PresenceStats{}, stats(t, m, ch))

	for _, c := range [][2]string{{"c1", "alice"}, {"c2", "alice"}, {"c3", "bob"}} {
		require.NoError(t, m.AddPresence(ch, c[0], clientInfo(c[0], c[1])))
	}
	p, err := m.Presence(ch)
	require.NoError(t, err)
	assert.Equal(t, map[string]*centrifuge.ClientInfo{
		"c1": clientInfo("c1", "alice"), "c2": clientInfo("c2", "alice"), "c3": clientInfo("c3", "bob"),
	}, p)
	assert.Equal(t, centrifuge.PresenceStats{NumClients: 3, NumUsers: 2}, stats(t, m, ch))

	// Re-adding a client replaces its entry, counted once.
	updated := clientInfo("c1", "alice")
	updated.ChanInfo = []byte("new")
	require.NoError(t, m.AddPresence(ch, "c1", updated))
	p, err = m.Presence(ch)
	require.NoError(t, err)
	assert.Equal(t, updated, p["c1"])
	assert.Equal(t, centrifuge.PresenceStats{NumClients: 3, NumUsers: 2}, stats(t, m, ch))

	require.NoError(t, m.RemovePresence(ch, "c1", "alice"))
	assert.Equal(t, []string{"c2", "c3"}, presentClients(t, m, ch))
	assert.Equal(t, centrifuge.PresenceStats{NumClients: 2, NumUsers: 2}, stats(t, m, ch))
	require.NoError(t, m.RemovePresence(ch, "c2", "alice"))
	assert.Equal(t, centrifuge.PresenceStats{NumClients: 1, NumUsers: 1}, stats(t, m, ch))
	// Removing what is not there changes nothing.
	require.NoError(t, m.RemovePresence(ch, "c2", "alice"))
	require.NoError(t, m.RemovePresence(ch, "nobody", "bob"))
	assert.Equal(t, []string{"c3"}, presentClients(t, m, ch))
	assert.Equal(t, centrifuge.PresenceStats{NumClients: 1, NumUsers: 1}, stats(t, m, ch))
	require.NoError(t, m.RemovePresence(ch, "c3", "bob"))
	assert.Equal(t, centrifuge.PresenceStats{}, stats(t, m, ch))
}

// testUserMapping: a mapped channel's user counts follow every change,
// read in one step from the users hash, and agree with the entries.
func testUserMapping(t *testing.T, m *PresenceManager, ch string) {
	require.True(t, m.mapped(ch))
	users := m.keys(ch)[3]
	for i := range 10 {
		c := "c" + strconv.Itoa(i)
		require.NoError(t, m.AddPresence(ch, c, clientInfo(c, "u"+strconv.Itoa(i%4))))
	}
	assert.Equal(t, centrifuge.PresenceStats{NumClients: 10, NumUsers: 4}, stats(t, m, ch))

	// A client re-added under another user moves to it.
	require.NoError(t, m.AddPresence(ch, "c0", clientInfo("c0", "newcomer")))
	assert.Equal(t, centrifuge.PresenceStats{NumClients: 10, NumUsers: 5}, stats(t, m, ch))
	// u0 keeps c4 and c8; removing them (with a wrong user ID: the entry
	// knows its own) drops u0.
	require.NoError(t, m.RemovePresence(ch, "c4", "wrong"))
	assert.Equal(t, centrifuge.PresenceStats{NumClients: 9, NumUsers: 5}, stats(t, m, ch))
	require.NoError(t, m.RemovePresence(ch, "c8", "u0"))
	assert.Equal(t, centrifuge.PresenceStats{NumClients: 8, NumUsers: 4}, stats(t, m, ch))

	// The stats agree with counting the entries, as an unmapped channel
	// does, and the users hash holds exactly the present users.
	p, err := m.Presence(ch)
	require.NoError(t, err)
	byUser := make(map[string]int64)
	for _, info := range p {
		byUser[info.UserID]++
	}
	assert.Len(t, byUser, 4)
	s := stats(t, m, ch)
	assert.Equal(t, centrifuge.PresenceStats{NumClients: len(p), NumUsers: len(byUser)}, s)
	for u, n := range byUser {
		got, err := m.engine.Eval(context.Background(), ch, shardcast.NewScript(`return redis.call('hget', KEYS[1], ARGV[1])`), []string{users}, u)
		require.NoError(t, err)
		assert.Equal(t, strconv.FormatInt(n, 10), got, "clients of %s", u)
	}
}

// testPresenceExpiry: entries not re-added within their TTL disappear,
// uncounted from their users; an entry with a longer TTL (another node's)
// outlives them, its keys' TTL not cut short; and once every entry is
// gone so are the channel's keys.
func testPresenceExpiry(t *testing.T, env *historyEnv, cfg PresenceConfig, ch string) {
	cfg.TTL = 300 * time.Millisecond
	short := newPresence(t, env.b, cfg)
	cfg.TTL = time.Minute
	long := newPresence(t, env.b, cfg)
	require.NoError(t, long.AddPresence(ch, "stays", clientInfo("stays", "carol")))
	require.NoError(t, short.AddPresence(ch, "goes1", clientInfo("goes1", "dave")))
	require.NoError(t, short.AddPresence(ch, "goes2", clientInfo("goes2", "carol")))
	waitFor(t, func() bool {
		p, err := short.Presence(ch)
		return err == nil && len(p) == 1 && p["stays"] != nil
	}, func() string { return "the short entries to expire" })
	// With FieldTTL, HLEN counts expired fields until the server's active
	// expiry deletes them, a moment later.
	waitFor(t, func() bool { return stats(t, short, ch) == centrifuge.PresenceStats{NumClients: 1, NumUsers: 1} },
		func() string { return fmt.Sprintf("stats %+v, want 1 client of 1 user", stats(t, short, ch)) })
	ctx := context.Background()
	srv := env.serverOf(ch)
	for i, k := range long.keys(ch) {
		if cfg.FieldTTL && i == 1 {
			continue // no expiry set
		}
		ms, err := srv.Do(ctx, "PTTL", k)
		require.NoError(t, err)
		assert.Greater(t, ms, int64(time.Second/time.Millisecond), "PTTL %s: the long entry's, not the short ones'", k)
	}

	// Only short entries: the keys themselves expire.
	ch2 := ch + "-all"
	require.NoError(t, short.AddPresence(ch2, "a", clientInfo("a", "erin")))
	require.NoError(t, short.AddPresence(ch2+"-unmapped", "a", clientInfo("a", "erin")))
	keys, srv2 := short.keys(ch2), env.serverOf(ch2)
	exists := func() int64 {
		n, err := srv2.Do(ctx, append([]string{"EXISTS"}, keys...)...)
		if err != nil {
			return -1
		}
		return n.(int64)
	}
	require.NotZero(t, exists())
	waitFor(t, func() bool { return exists() == 0 }, func() string { return fmt.Sprintf("%d keys left", exists()) })
	assert.Equal(t, centrifuge.PresenceStats{}, stats(t, short, ch2))
	waitFor(t, func() bool { p, err := short.Presence(ch2 + "-unmapped"); return err == nil && len(p) == 0 },
		func() string { return "the unmapped channel's entry to expire" })
}

// testPresenceAddSweeps: in a channel nobody reads, re-adding a live
// client leaves expired entries in place, and adding a new client removes
// them and uncounts their users.
func testPresenceAddSweeps(t *testing.T, env *historyEnv, ch string) {
	short := newPresence(t, env.b, PresenceConfig{TTL: 200 * time.Millisecond, UserMapping: mapped})
	long := newPresence(t, env.b, PresenceConfig{TTL: time.Minute, UserMapping: mapped})
	require.NoError(t, long.AddPresence(ch, "live", clientInfo("live", "ann")))
	require.NoError(t, short.AddPresence(ch, "dead1", clientInfo("dead1", "bo")))
	require.NoError(t, short.AddPresence(ch, "dead2", clientInfo("dead2", "cy")))
	ctx := context.Background()
	srv, keys := env.serverOf(ch), long.keys(ch)
	count := func(cmd string, key int) int64 {
		n, err := srv.Do(ctx, cmd, keys[key])
		require.NoError(t, err)
		return n.(int64)
	}
	time.Sleep(300 * time.Millisecond) // past the short entries' TTL
	require.NoError(t, long.AddPresence(ch, "live", clientInfo("live", "ann")))
	assert.Equal(t, int64(3), count("HLEN", 0), "clients after a re-add: the dead entries are still there")
	assert.Equal(t, int64(3), count("HLEN", 3), "users after a re-add")

	require.NoError(t, long.AddPresence(ch, "new", clientInfo("new", "ann")))
	assert.Equal(t, int64(2), count("HLEN", 0), "clients after a new client's add")
	assert.Equal(t, int64(2), count("ZCARD", 1), "expiry after a new client's add")
	assert.Equal(t, int64(2), count("HLEN", 2), "user_of after a new client's add")
	assert.Equal(t, int64(1), count("HLEN", 3), "users after a new client's add: only ann")
}

// testPresenceKeyPlacement: every presence key of a channel is on the
// server that carries the channel and, on a cluster, in the channel's
// slot as the live server computes it.
func testPresenceKeyPlacement(t *testing.T, env *historyEnv, m *PresenceManager, name string) {
	ctx := context.Background()
	for i := range 20 {
		ch := fmt.Sprintf("%splace-%s-%d", mapPrefix, name, i)
		require.NoError(t, m.AddPresence(ch, "c", clientInfo("c", "u")))
		keys := m.keys(ch)
		require.Len(t, keys, 4)
		srv := env.serverOf(ch)
		n, err := srv.Do(ctx, append([]string{"EXISTS"}, keys...)...)
		require.NoError(t, err)
		want := int64(4)
		if m.fieldTTL {
			want = 3 // no expiry set
		}
		assert.Equal(t, want, n, "%s on the channel's server", keys)
		if want, ok := env.keySlot(ch); ok {
			slots, err := srv.KeySlots(ctx, keys...)
			require.NoError(t, err)
			for j, s := range slots {
				assert.Equal(t, want, s, "CLUSTER KEYSLOT %s", keys[j])
			}
		}
	}
}

// TestPresenceKeyNames pins the presence keys' names: a cluster's are
// Layout.PartitionKey of the channel's partition, beside its history.
func TestPresenceKeyNames(t *testing.T) {
	node, err := centrifuge.New(centrifuge.Config{LogLevel: centrifuge.LogLevelNone,
		Metrics: centrifuge.MetricsConfig{RegistererGatherer: prometheus.NewRegistry()}})
	require.NoError(t, err)
	b, err := New(node, Config{KeyPrefix: "kp.", Cluster: &cluster.Config{Addrs: redistest.OnDemandCluster(), Prefix: "app."}})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, b.Close(context.Background())) })
	m := newPresence(t, b, PresenceConfig{})
	l := b.engine.(*cluster.Broker).Layout()
	for i := range 50 {
		ch := "names:" + strconv.Itoa(i) + strings.Repeat("y", i)
		key := func(name string) string { return l.PartitionKey(l.Partition(ch), "kp.presence."+name+"."+ch) }
		assert.Equal(t, []string{key("clients"), key("expiry"), key("user_of"), key("users")}, m.keys(ch))
	}
}

// TestPresenceBadInput: bad configuration and bad calls get an error and
// change nothing.
func TestPresenceBadInput(t *testing.T) {
	_, err := NewPresenceManager(nil, PresenceConfig{})
	assert.ErrorIs(t, err, shardcast.ErrInvalidConfig)
	s := redistest.StartStandalone(t)
	env := newHistoryEnv(t, Config{Sharded: &sharded.Config{Addrs: []string{s.Addr()}}}, func(*Broker, string) *redistest.Server { return s })
	_, err = NewPresenceManager(env.b, PresenceConfig{TTL: -time.Second})
	assert.ErrorIs(t, err, shardcast.ErrInvalidConfig)
	_, err = NewPresenceManager(env.b, PresenceConfig{ReadFromReplicas: true})
	assert.ErrorIs(t, err, shardcast.ErrInvalidConfig, "ReadFromReplicas without FieldTTL")
	m := newPresence(t, env.b, PresenceConfig{UserMapping: func(string) bool { return true }})

	for _, tc := range []struct {
		ch   string
		want error
	}{
		{"", shardcast.ErrInvalidChannel},
		{DefaultControlChannel, ErrReservedChannel},
	} {
		assert.ErrorIs(t, m.AddPresence(tc.ch, "c", clientInfo("c", "u")), tc.want, "AddPresence(%q)", tc.ch)
		assert.ErrorIs(t, m.RemovePresence(tc.ch, "c", "u"), tc.want, "RemovePresence(%q)", tc.ch)
		_, err := m.Presence(tc.ch)
		assert.ErrorIs(t, err, tc.want, "Presence(%q)", tc.ch)
		_, err = m.PresenceStats(tc.ch)
		assert.ErrorIs(t, err, tc.want, "PresenceStats(%q)", tc.ch)
	}
	assert.Error(t, m.AddPresence("ch", "c", nil), "nil ClientInfo")
	for _, ch := range []string{"", DefaultControlChannel, "ch"} {
		n, err := s.Do(context.Background(), append([]string{"EXISTS"}, m.keys(ch)...)...)
		require.NoError(t, err)
		assert.Zero(t, n, "nothing written for %q", ch)
	}
}

// TestPresenceAfterClose: the PresenceManager uses the Broker's engine;
// once the Broker is closed its calls fail with ErrClosed.
func TestPresenceAfterClose(t *testing.T) {
	s := redistest.StartStandalone(t)
	env := newHistoryEnv(t, Config{Sharded: &sharded.Config{Addrs: []string{s.Addr()}}}, func(*Broker, string) *redistest.Server { return s })
	m := newPresence(t, env.b, PresenceConfig{})
	require.NoError(t, m.AddPresence("ch", "c", clientInfo("c", "u")))
	require.NoError(t, env.b.Close(context.Background()))
	assert.ErrorIs(t, m.AddPresence("ch", "c", clientInfo("c", "u")), shardcast.ErrClosed)
	_, err := m.Presence("ch")
	assert.ErrorIs(t, err, shardcast.ErrClosed)
}

// TestPresenceReadClock: a read sweeps by the server's clock, which it
// asks only once the calling node's clock says the earliest entry may be
// due: a node whose clock runs far ahead removes no live entry, one far
// behind sees an expired entry until its clock passes it, and one in step
// sees it gone.
func TestPresenceReadClock(t *testing.T) {
	s := redistest.StartStandalone(t)
	env := newHistoryEnv(t, Config{Sharded: &sharded.Config{Addrs: []string{s.Addr()}}}, func(*Broker, string) *redistest.Server { return s })
	long := newPresence(t, env.b, PresenceConfig{UserMapping: mapped})
	short := newPresence(t, env.b, PresenceConfig{UserMapping: mapped, TTL: 100 * time.Millisecond})
	const ch = mapPrefix + "clock"
	require.NoError(t, long.AddPresence(ch, "live", clientInfo("live", "ann")))
	require.NoError(t, short.AddPresence(ch, "dead", clientInfo("dead", "bo")))
	time.Sleep(200 * time.Millisecond) // past the short entry's TTL
	read := func(nodeMillis int64) int {
		t.Helper()
		v, err := long.engine.Eval(context.Background(), ch, presenceScript, long.keys(ch), strconv.FormatInt(nodeMillis, 10))
		require.NoError(t, err)
		return len(v.([]any))
	}
	assert.Equal(t, 2, read(time.Now().Add(-time.Hour).UnixMilli()), "a node an hour behind still sees the expired entry")
	assert.Equal(t, 1, read(time.Now().Add(time.Hour).UnixMilli()), "a node an hour ahead: the server's clock removes the expired entry only")
	require.NoError(t, short.AddPresence(ch, "dead", clientInfo("dead", "bo")))
	time.Sleep(200 * time.Millisecond)
	assert.Equal(t, []string{"live"}, presentClients(t, long, ch), "a node in step sees the expired entry gone")
	assert.Equal(t, centrifuge.PresenceStats{NumClients: 1, NumUsers: 1}, stats(t, long, ch))
}
