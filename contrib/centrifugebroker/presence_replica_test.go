package centrifugebroker

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/centrifugal/centrifuge"
	"github.com/shardcast/shardcast/cluster"
	"github.com/shardcast/shardcast/redistest"
	"github.com/shardcast/shardcast/sharded"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// readOnlyCalls sums the read-only script calls servers have served.
func readOnlyCalls(t *testing.T, servers []*redistest.Server) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	n, err := redistest.ReadOnlyScripts(ctx, servers...)
	require.NoError(t, err)
	return n
}

// TestPresenceReadFromReplicas: with FieldTTL and ReadFromReplicas, on an
// engine that subscribes on replicas, Presence and PresenceStats are
// served by replicas and no master serves a read; they see adds, removes
// and expiry; and once the replica that served them is killed, the same
// calls are answered (by the master, then another replica) without an
// error. On both engines, on servers with per-field expiry.
func TestPresenceReadFromReplicas(t *testing.T) {
	type setup struct {
		cfg              Config
		masters, replica func() []*redistest.Server
		probe            *redistest.Server
	}
	for name, start := range map[string]func(t *testing.T) setup{
		"cluster": func(t *testing.T) setup {
			c := redistest.StartCluster(t, 3, 1)
			ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
			defer cancel()
			masters, err := c.Masters(ctx)
			require.NoError(t, err)
			replicas, err := c.Replicas(ctx)
			require.NoError(t, err)
			return setup{Config{Cluster: &cluster.Config{Addrs: c.Seeds(), SubscribeOn: cluster.Replicas}},
				func() []*redistest.Server { return masters }, func() []*redistest.Server { return replicas }, masters[0]}
		},
		"sharded": func(t *testing.T) setup {
			r := redistest.StartReplicated(t, 2)
			s := redistest.StartSentinels(t, 3, redistest.SentinelGroup{Name: "a", Servers: r})
			return setup{Config{Sharded: &sharded.Config{Addrs: []string{s.URL("a")}, SubscribeOn: sharded.Replicas}},
				func() []*redistest.Server { return []*redistest.Server{r.Master()} }, r.Replicas, r.Master()}
		},
	} {
		t.Run(name, func(t *testing.T) {
			su := start(t)
			if !hasFieldTTL(t, su.probe) {
				t.Skip("the server has no per-field expiry (HPEXPIRE)")
			}
			env := newHistoryEnv(t, su.cfg, nil)
			m := newPresence(t, env.b, PresenceConfig{UserMapping: mapped, FieldTTL: true, ReadFromReplicas: true})
			short := newPresence(t, env.b, PresenceConfig{UserMapping: mapped, FieldTTL: true, TTL: 300 * time.Millisecond})
			const ch = mapPrefix + "replica-reads"
			for i := range 6 {
				c := fmt.Sprintf("c%d", i)
				require.NoError(t, m.AddPresence(ch, c, clientInfo(c, fmt.Sprintf("u%d", i%3))))
			}
			require.NoError(t, short.AddPresence(ch, "brief", clientInfo("brief", "u9")))
			require.NoError(t, m.RemovePresence(ch, "c5", "u2"))
			want := centrifuge.PresenceStats{NumClients: 5, NumUsers: 3}
			// A replica shows the writes once they reached it, and the
			// short entry's expiry once the master's deletion did.
			waitFor(t, func() bool {
				s, err := m.PresenceStats(ch)
				p, perr := m.Presence(ch)
				return err == nil && s == want && perr == nil && len(p) == 5
			}, func() string {
				s, err := m.PresenceStats(ch)
				return fmt.Sprintf("stats %+v, %v; want %+v", s, err, want)
			})

			onReplicas, onMasters := readOnlyCalls(t, su.replica()), readOnlyCalls(t, su.masters())
			for range 10 {
				p, err := m.Presence(ch)
				require.NoError(t, err)
				assert.Len(t, p, 5)
				assert.Equal(t, clientInfo("c0", "u0"), p["c0"])
				assert.Equal(t, want, stats(t, m, ch))
			}
			assert.Equal(t, onReplicas+20, readOnlyCalls(t, su.replica()), "replicas served the reads")
			assert.Equal(t, onMasters, readOnlyCalls(t, su.masters()), "no master served a read")

			// Kill every replica that served them: the reads go on.
			for _, r := range su.replica() {
				require.NoError(t, r.Kill())
			}
			for range 10 {
				p, err := m.Presence(ch)
				require.NoError(t, err)
				assert.Len(t, p, 5)
				assert.Equal(t, want, stats(t, m, ch))
			}
		})
	}
}
