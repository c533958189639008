package centrifugebroker

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/centrifugal/centrifuge"
	"github.com/shardcast/shardcast/cluster"
	"github.com/shardcast/shardcast/redistest"
	"github.com/shardcast/shardcast/sharded"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// persistent makes a test server keep every write across a restart, so
// that what a restart leaves is up to presence, not to the harness.
var persistent = redistest.WithArgs("--appendonly", "yes", "--appendfsync", "always")

// TestPresenceServerDown kills the Redis server that holds a channel's
// presence and restarts it, on each engine: while it is down every call
// fails with an error; once it is back the calls work again, the entries
// it kept are there, and those of a node that died meanwhile (never
// re-added, never removed) expire while the live node's stay.
func TestPresenceServerDown(t *testing.T) {
	const ch = mapPrefix + "down"
	type server struct {
		cfg      Config
		serverOf func(*Broker, string) *redistest.Server
		restart  func(context.Context, *redistest.Server) error
	}
	for name, start := range map[string]func(t *testing.T) server{
		"sharded": func(t *testing.T) server {
			s := redistest.StartStandalone(t, persistent)
			return server{Config{Sharded: &sharded.Config{Addrs: []string{s.Addr()}}},
				func(*Broker, string) *redistest.Server { return s },
				func(ctx context.Context, s *redistest.Server) error { return s.Restart(ctx) }}
		},
		"cluster": func(t *testing.T) server {
			c := redistest.StartCluster(t, 3, 0, persistent)
			return server{Config{Cluster: &cluster.Config{Addrs: c.Seeds()}},
				func(b *Broker, ch string) *redistest.Server {
					l := b.engine.(*cluster.Broker).Layout()
					ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
					defer cancel()
					s, err := c.MasterOfSlot(ctx, l.Slot(l.Partition(ch)))
					require.NoError(t, err)
					return s
				},
				c.RestartNode}
		},
	} {
		t.Run(name, func(t *testing.T) {
			srv := start(t)
			cfg := srv.cfg
			// Short, so that calls fail soon while the server is down.
			cfg.CallTimeout = 2 * time.Second
			liveEnv, deadEnv := newHistoryEnv(t, cfg, srv.serverOf), newHistoryEnv(t, cfg, nil)
			victim := liveEnv.serverOf(ch)
			live := newPresence(t, liveEnv.b, PresenceConfig{TTL: time.Minute, UserMapping: mapped})
			dead := newPresence(t, deadEnv.b, PresenceConfig{TTL: time.Second, UserMapping: mapped})
			require.NoError(t, live.AddPresence(ch, "live", clientInfo("live", "lee")))
			require.NoError(t, dead.AddPresence(ch, "dead1", clientInfo("dead1", "dan")))
			require.NoError(t, dead.AddPresence(ch, "dead2", clientInfo("dead2", "lee")))
			require.NoError(t, deadEnv.b.Close(context.Background())) // its node dies

			require.NoError(t, victim.Kill())
			assert.Error(t, live.AddPresence(ch, "live", clientInfo("live", "lee")), "AddPresence while down")
			assert.Error(t, live.RemovePresence(ch, "other", "lee"), "RemovePresence while down")
			_, err := live.Presence(ch)
			assert.Error(t, err, "Presence while down")
			_, err = live.PresenceStats(ch)
			assert.Error(t, err, "PresenceStats while down")

			ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
			defer cancel()
			require.NoError(t, srv.restart(ctx, victim))
			var p map[string]*centrifuge.ClientInfo
			waitFor(t, func() bool { p, err = live.Presence(ch); return err == nil },
				func() string { return fmt.Sprintf("presence to work again: %v", err) })
			assert.Contains(t, p, "live", "kept across the restart")
			require.NoError(t, live.AddPresence(ch, "live", clientInfo("live", "lee")), "the live node's periodic update")
			waitFor(t, func() bool {
				p, err = live.Presence(ch)
				return err == nil && slices.Equal(slices.Sorted(maps.Keys(p)), []string{"live"})
			}, func() string {
				return fmt.Sprintf("the dead node's entries to expire: %v (err %v)", slices.Sorted(maps.Keys(p)), err)
			})
			assert.Equal(t, centrifuge.PresenceStats{NumClients: 1, NumUsers: 1}, stats(t, live, ch))
		})
	}
}
