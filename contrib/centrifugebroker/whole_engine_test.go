package centrifugebroker

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/centrifugal/centrifuge"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardcast/shardcast/cluster"
	"github.com/shardcast/shardcast/redistest"
	"github.com/shardcast/shardcast/sharded"
)

// wholeEnv is two masters' worth of servers for TestWholeEngine: the
// config the nodes use, the masters, and which master carries a channel.
type wholeEnv struct {
	cfg      Config
	masters  []*redistest.Server
	masterOf func(b *Broker, ch string) *redistest.Server
	// control is how many connections a node holds to masters[0] beyond
	// one subscribe and one publish connection: the sharded engine's
	// agreement keeps its own connection to its control instance.
	control int
}

// wholeEngines starts, for each engine, servers of the test's own, so
// that every connection counted on them is the nodes'.
func wholeEngines() map[string]func(t *testing.T) *wholeEnv {
	return map[string]func(t *testing.T) *wholeEnv{
		"cluster": func(t *testing.T) *wholeEnv {
			c := redistest.StartCluster(t, 3, 0)
			ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
			defer cancel()
			masters, err := c.Masters(ctx)
			require.NoError(t, err)
			return &wholeEnv{
				cfg:     Config{Cluster: &cluster.Config{Addrs: c.Seeds()}},
				masters: masters,
				masterOf: func(b *Broker, ch string) *redistest.Server {
					l := b.engine.(*cluster.Broker).Layout()
					ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
					defer cancel()
					s, err := c.MasterOfSlot(ctx, l.Slot(l.Partition(ch)))
					require.NoError(t, err)
					return s
				},
			}
		},
		"sharded": func(t *testing.T) *wholeEnv {
			servers := []*redistest.Server{redistest.StartStandalone(t), redistest.StartStandalone(t)}
			return &wholeEnv{
				cfg:     Config{Sharded: &sharded.Config{Addrs: []string{servers[0].Addr(), servers[1].Addr()}}},
				masters: servers,
				masterOf: func(b *Broker, ch string) *redistest.Server {
					return servers[b.engine.(*sharded.Broker).Shard(ch)]
				},
				control: 1,
			}
		},
	}
}

// TestWholeEngine runs two Centrifuge nodes whose Broker, PresenceManager
// and MapBroker all come from one shardcast Broker each, on both engines:
// real clients on either node see each other's presence and publications,
// a map publication on one node is in the other's state and reaches its
// live handler, and each node holds at most one subscribe and one publish
// connection per master however many channels, maps and partitions.
func TestWholeEngine(t *testing.T) {
	for name, start := range wholeEngines() {
		t.Run(name, func(t *testing.T) {
			env := start(t)
			before := clientIDs(t, env.masters)
			pcfg := &PresenceConfig{UserMapping: mapped}
			a, b := startNodeWith(t, env.cfg, pcfg, true), startNodeWith(t, env.cfg, pcfg, true)
			ch, mapCh := "whole-"+name, mapRecoverable+"whole-"+name

			alice := connect(t, a, "alice").subscribe(t, ch)[0]
			bob := connect(t, b, "bob").subscribe(t, ch)[0]
			var users []string
			var err error
			waitFor(t, func() bool {
				users, err = presentUsers(a, ch)
				return err == nil && slices.Equal(users, []string{"alice", "bob"})
			}, func() string { return fmt.Sprintf("presence of %s on A: %q (err %v)", ch, users, err) })
			ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
			defer cancel()
			ps, err := alice.sub.PresenceStats(ctx)
			require.NoError(t, err)
			assert.Equal(t, 2, ps.NumClients)
			assert.Equal(t, 2, ps.NumUsers)

			_, err = bob.sub.Publish(ctx, []byte("from bob"))
			require.NoError(t, err)
			waitFor(t, func() bool { return alice.has("from bob") },
				func() string { return fmt.Sprintf("alice on A got %q", alice.received()) })

			fw := &forwarding{node: b.node}
			require.NoError(t, b.maps.RegisterEventHandler(fw))
			require.NoError(t, b.maps.Subscribe(mapCh))
			r, err := a.node.MapPublish(ctx, mapCh, "doc", centrifuge.MapPublishOptions{Data: []byte("v1")})
			require.NoError(t, err)
			st, err := b.node.MapStateRead(ctx, mapCh, centrifuge.MapReadStateOptions{Limit: -1})
			require.NoError(t, err)
			require.Len(t, st.Publications, 1)
			assert.Equal(t, "v1", string(st.Publications[0].Data))
			assert.Equal(t, r.Position, st.Position, "B's state is at A's publication")
			waitFor(t, func() bool {
				fw.mu.Lock()
				defer fw.mu.Unlock()
				return len(fw.pubs) == 1
			}, func() string { return "node B's live handler to get the map publication" })

			// Every call above has run: count what the nodes hold.
			chMaster := env.masterOf(a.broker, ch)
			for i, m := range env.masters {
				conns := newClients(t, m, before[m.Addr()])
				subscribed := 0
				for _, c := range conns {
					if c["sub"] != "0" || c["ssub"] != "0" || c["psub"] != "0" {
						subscribed++
					}
				}
				limit := 2 * 2 // two nodes, a subscribe and a publish connection each
				if i == 0 {
					limit += 2 * env.control
				}
				assert.LessOrEqual(t, len(conns), limit, "connections on %s: %v", m.Addr(), cmdsOf(conns))
				assert.LessOrEqual(t, subscribed, 2, "subscribed connections on %s", m.Addr())
				if m == chMaster {
					assert.Equal(t, 2, subscribed, "both nodes subscribe %s on %s, each on one connection", ch, m.Addr())
				}
			}
		})
	}
}

// clientIDs returns, per master address, the IDs of the connections it
// has now.
func clientIDs(t *testing.T, masters []*redistest.Server) map[string]map[string]bool {
	t.Helper()
	out := make(map[string]map[string]bool, len(masters))
	for _, m := range masters {
		out[m.Addr()] = make(map[string]bool)
		for _, c := range clientList(t, m) {
			out[m.Addr()][c["id"]] = true
		}
	}
	return out
}

// newClients returns m's connections whose IDs are not in old.
func newClients(t *testing.T, m *redistest.Server, old map[string]bool) []map[string]string {
	t.Helper()
	var out []map[string]string
	for _, c := range clientList(t, m) {
		if !old[c["id"]] {
			out = append(out, c)
		}
	}
	return out
}

// clientList is m's CLIENT LIST, bounded by waitTimeout.
func clientList(t *testing.T, m *redistest.Server) []map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	list, err := m.ClientList(ctx)
	require.NoError(t, err)
	return list
}

// cmdsOf names each connection by its last command, for failure messages.
func cmdsOf(conns []map[string]string) string {
	var s []string
	for _, c := range conns {
		s = append(s, c["cmd"])
	}
	return strings.Join(s, ",")
}
