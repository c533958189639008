package cluster

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// nodeConns counts the client connections of one node that are not
// replication links (flags S and M), the harness's own question left out:
// subscribe holds those with a subscription, command the rest.
type nodeConns struct{ subscribe, command int }

func (n nodeConns) String() string {
	return fmt.Sprintf("%d subscribe + %d command", n.subscribe, n.command)
}

// countConns returns nodeConns for every node, by address.
func countConns(ctx context.Context, nodes []*redistest.Server) (map[string]nodeConns, error) {
	out := make(map[string]nodeConns, len(nodes))
	for _, s := range nodes {
		clients, err := s.ClientList(ctx)
		if err != nil {
			return nil, err
		}
		var n nodeConns
		for _, c := range clients {
			if strings.ContainsAny(c["flags"], "SM") {
				continue
			}
			if c["ssub"] != "0" || c["sub"] != "0" {
				n.subscribe++
			} else {
				n.command++
			}
		}
		out[s.Addr()] = n
	}
	return out, nil
}

// requireConns waits until every running node holds the connections want
// gives it (a closed connection leaves CLIENT LIST a moment after the
// close), then requires it.
func requireConns(t *testing.T, c *redistest.Cluster, want func(addr string) nodeConns, step string) {
	t.Helper()
	ctx := testCtx(t, 30*time.Second)
	var nodes []*redistest.Server
	for _, s := range c.Nodes() {
		if s.Running() {
			nodes = append(nodes, s)
		}
	}
	wanted := make(map[string]nodeConns, len(nodes))
	for _, s := range nodes {
		wanted[s.Addr()] = want(s.Addr())
	}
	var got map[string]nodeConns
	var err error
	waitFor(10*time.Second, func() bool {
		got, err = countConns(ctx, nodes)
		return err == nil && maps.Equal(got, wanted)
	})
	require.NoError(t, err)
	require.Equal(t, wanted, got, "%s: connections per node", step)
	t.Logf("FIGURE connections, %s: %v", step, got)
}

// TestTwoConnectionsPerMaster: a broker that subscribes and publishes
// holds exactly two connections per master, one subscribe and one command
// connection, which also carries its slot-map polls and ROLE checks, and
// none to replicas; a publish-only broker holds one per master. A slot
// move its publishes learn of by MOVED, and a failover, leave those counts
// as they were: the redirected publishes reuse the connection to the new
// owner, and the promoted replica gets the dead master's two.
func TestTwoConnectionsPerMaster(t *testing.T) {
	c := redistest.StartCluster(t, 3, 1)
	ctx := testCtx(t, 2*time.Minute)
	masters, err := c.Masters(ctx)
	require.NoError(t, err)
	isMaster := func(addr string) bool {
		for _, m := range masters {
			if m.Addr() == addr {
				return true
			}
		}
		return false
	}
	before := make(map[string]map[string]int64)
	for _, m := range masters {
		before[m.Addr()], err = m.CommandStats(ctx)
		require.NoError(t, err)
	}

	rec := newRecorder()
	// Short intervals, so that slot-map polls and ROLE checks run many
	// times before the connections are counted.
	fast := shardcast.ConnOptions{HealthInterval: 50 * time.Millisecond}
	both := newBroker(t, Config{Addrs: c.Seeds(), TopologyInterval: 50 * time.Millisecond, Conn: fast,
		Options: shardcast.Options{Handler: rec.handle}})
	l := both.Layout()
	channels := channelsPerPartition(l, 1, "two.")
	require.NoError(t, both.Subscribe(ctx, channels...))
	mark := time.Now()
	publishAll(t, both, channels, "1")
	rec.waitSilentSince(t, channels, mark, 20*time.Second)
	require.True(t, waitFor(10*time.Second, func() bool {
		for _, m := range masters {
			st, err := m.CommandStats(ctx)
			if err != nil || st["cluster|slots"] < before[m.Addr()]["cluster|slots"]+3 || st["role"] < before[m.Addr()]["role"]+3 {
				return false
			}
		}
		return true
	}), "the broker polled the slot map and checked ROLE on every master")
	requireConns(t, c, func(addr string) nodeConns {
		if isMaster(addr) {
			return nodeConns{subscribe: 1, command: 1}
		}
		return nodeConns{}
	}, "subscribing and publishing broker")

	// A publish-only broker that learns of topology changes only from its
	// publishes (its periodic poll is due after the test).
	pub := newBroker(t, Config{Addrs: c.Seeds(), TopologyInterval: time.Hour})
	mark = time.Now()
	publishAll(t, pub, channels, "2")
	rec.waitSilentSince(t, channels, mark, 20*time.Second)
	threePerMaster := func(addr string) nodeConns {
		if isMaster(addr) {
			return nodeConns{subscribe: 1, command: 2}
		}
		return nodeConns{}
	}
	requireConns(t, c, threePerMaster, "plus a publish-only broker")

	// Slot move: the publish-only broker still routes the partition to its
	// old master, which redirects; the resend goes out on the connection
	// it holds to the new owner.
	from, to := masters[0], masters[1]
	// Not partition 0: its slot holds the layout record, whose keys the
	// move carries with MIGRATE, on a connection between the two nodes
	// that Redis keeps open for a while and CLIENT LIST shows.
	p := slices.DeleteFunc(sortedCopy(pub.partitionsOf(from.Addr())), func(p int) bool { return p == 0 })[0]
	require.NoError(t, c.MoveSlot(ctx, l.Slot(p), to))
	followedTo(t, both, p, to.Addr())
	require.True(t, routedTo(pub, p, from.Addr()), "the publish-only broker's route is still stale")
	_, rejected := spublishStats(t, from)
	moved := inPartitions(l, channels, []int{p})
	mark = time.Now()
	publishAll(t, pub, moved, "3")
	rec.waitSilentSince(t, moved, mark, 20*time.Second)
	_, nowRejected := spublishStats(t, from)
	assert.Greater(t, nowRejected, rejected, "the old master redirected the publishes")
	requireConns(t, c, threePerMaster, "after a slot move")

	// Failover: the promoted replica takes over the dead master's two
	// connections from the first broker and one from the second.
	victim := masters[2]
	parts := sortedCopy(both.partitionsOf(victim.Addr()))
	require.NoError(t, victim.Kill())
	promoted, err := c.WaitFailover(ctx, victim)
	require.NoError(t, err)
	lost := inPartitions(l, channels, parts)
	require.True(t, waitFor(30*time.Second, func() bool {
		mark := time.Now()
		for _, b := range []*Broker{both, pub} {
			for _, ch := range lost {
				if err := b.Publish(ctx, ch, []byte("4")); err != nil {
					return false
				}
			}
		}
		return waitFor(2*time.Second, func() bool { return len(rec.silentSince(lost, mark)) == 0 })
	}), "the dead master's partitions never delivered again")
	for _, p := range parts {
		followedTo(t, both, p, promoted.Addr())
		require.True(t, waitFor(10*time.Second, func() bool { return routedTo(pub, p, promoted.Addr()) }))
	}
	masters = []*redistest.Server{masters[0], masters[1], promoted}
	requireConns(t, c, threePerMaster, "after a failover")
}
