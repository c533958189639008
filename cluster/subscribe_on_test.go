package cluster

import (
	"maps"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/brokertest"
	"github.com/shardcast/shardcast/internal/crc16"
	"github.com/shardcast/shardcast/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPlacement(t *testing.T) {
	slots := shardcast.SlotMap{Ranges: []shardcast.SlotRange{
		{Start: 0, End: 99, Master: "m1", Replicas: []string{"r1b", "r1a"}},
		{Start: 100, End: 199, Master: "m2", Replicas: []string{"r2a"}},
		{Start: 200, End: 299, Master: "m3"},
		{Start: 300, End: 301, Master: "m1", Replicas: []string{"r1b", "r1a"}},
	}}
	assign := shardcast.Assignment{"m1", "m2", "m3", "m1", ""}
	none := func(string) bool { return false }

	assert.Equal(t, assign, placement(Masters, 7, slots, assign, none))

	// Replicas: shard m1 starts at slot 0, so seq picks among r1a, r1b
	// directly; m2 has one replica; m3 none (its master).
	for seq, want := range map[uint64]shardcast.Assignment{
		0: {"r1a", "r2a", "m3", "r1a", ""},
		1: {"r1b", "r2a", "m3", "r1b", ""},
		2: {"r1a", "r2a", "m3", "r1a", ""},
	} {
		assert.Equal(t, want, placement(Replicas, seq, slots, assign, none), "seq %d", seq)
	}
	// AllNodes: m1's shard is m1, r1a, r1b; m2's (first slot 100) m2, r2a.
	count := map[string]int{}
	for seq := range uint64(6) {
		for _, n := range placement(AllNodes, seq, slots, assign, none)[:3] {
			count[n]++
		}
	}
	assert.Equal(t, map[string]int{"m1": 2, "r1a": 2, "r1b": 2, "m2": 3, "r2a": 3, "m3": 6}, count,
		"six brokers numbered in turn spread evenly over each shard")

	// An avoided node is left out while its shard has another.
	avoid := func(addr string) bool { return addr == "r1a" || addr == "r2a" }
	assert.Equal(t, shardcast.Assignment{"r1b", "m2", "m3", "r1b", ""}, placement(Replicas, 0, slots, assign, avoid),
		"m2's only replica avoided: its master")
	assert.Equal(t, shardcast.Assignment{"m1", "m2", "m3", "m1", ""},
		placement(Replicas, 0, slots, assign, func(a string) bool { return a != "m2" && a != "m3" && a != "m1" }),
		"every replica avoided: the masters")

	assert.True(t, sameShard(slots, "r1a", "r1b"))
	assert.True(t, sameShard(slots, "m1", "r1b"))
	assert.False(t, sameShard(slots, "r1a", "r2a"))
}

func TestSubscribeOnConfig(t *testing.T) {
	_, err := Config{Addrs: []string{"127.0.0.1:1"}, SubscribeOn: 3}.settings()
	require.ErrorIs(t, err, shardcast.ErrInvalidConfig)
	assert.Contains(t, err.Error(), "SubscribeOn")
	s, err := Config{Addrs: []string{"127.0.0.1:1"}, SubscribeOn: Replicas}.settings()
	require.NoError(t, err)
	assert.Equal(t, DefaultRelayProbeInterval, s.Conn.ProbeInterval, "probes on by default off masters")
	assert.True(t, s.subDialer("x:1").ReadOnly)
	assert.False(t, s.dialer("x:1").ReadOnly, "publishing connections stay read-write")
	s, err = Config{Addrs: []string{"127.0.0.1:1"}}.settings()
	require.NoError(t, err)
	assert.Zero(t, s.Conn.ProbeInterval, "Masters keeps probes off by default")
	assert.Equal(t, "AllNodes", AllNodes.String())
}

// replicaCluster starts a 3-master cluster with two replicas each and
// waits until CLUSTER SLOTS lists every replica (a replica is left out
// until its replication offset moved: a write to each shard moves it).
func replicaCluster(t *testing.T) *redistest.Cluster {
	c := redistest.StartCluster(t, 3, 2)
	ctx := testCtx(t, 30*time.Second)
	masters, err := c.Masters(ctx)
	require.NoError(t, err)
	for _, m := range masters {
		for i := 0; ; i++ {
			key := "offset{" + strconv.Itoa(i) + "}"
			owner, err := c.MasterOfSlot(ctx, crc16.Slot(key))
			require.NoError(t, err)
			if owner.Addr() == m.Addr() {
				_, err = m.Do(ctx, "SET", key, "1")
				require.NoError(t, err)
				break
			}
		}
	}
	require.True(t, waitFor(20*time.Second, func() bool {
		v, err := masters[0].Do(ctx, "CLUSTER", "SLOTS")
		if err != nil {
			return false
		}
		m, err := ParseSlots(v, masters[0].Addr())
		if err != nil {
			return false
		}
		for _, r := range m.Ranges {
			if len(r.Replicas) != 2 {
				return false
			}
		}
		return true
	}), "CLUSTER SLOTS never listed two replicas per master")
	return c
}

// shardSubscribers counts, on every node of c, the clients holding sharded
// subscriptions.
func shardSubscribers(t *testing.T, c *redistest.Cluster) map[string]int {
	ctx := testCtx(t, 10*time.Second)
	out := map[string]int{}
	for _, n := range c.Nodes() {
		clients, err := n.ClientList(ctx)
		require.NoError(t, err)
		for _, cl := range clients {
			if v, err := strconv.Atoi(cl["ssub"]); err == nil && v > 0 {
				out[n.Addr()]++
			}
		}
	}
	return out
}

// TestSubscribeOnPlacement: six brokers with Replicas hold their subscribe
// connections on replicas only, three on each (as the servers count
// them), and deliver every message once and in order; with AllNodes, two
// on each node of every shard.
func TestSubscribeOnPlacement(t *testing.T) {
	c := replicaCluster(t)
	ctx := testCtx(t, 60*time.Second)
	masters, err := c.Masters(ctx)
	require.NoError(t, err)
	isMaster := func(addr string) bool {
		return slices.ContainsFunc(masters, func(m *redistest.Server) bool { return m.Addr() == addr })
	}
	for _, on := range []SubscribeOn{Replicas, AllNodes} {
		t.Run(on.String(), func(t *testing.T) {
			channels := numbered("place."+on.String()+".", 300)
			fleet := brokertest.NewFaultFleet(t, 6, channels, brokertest.FaultFleetOptions{},
				func(h shardcast.Handler, ev func(shardcast.Event)) shardcast.Broker {
					// Default connection settings: the short health timeout of
					// faultConn drops wires on a loaded host, and moves them.
					return newBroker(t, Config{Addrs: c.Seeds(), SubscribeOn: on,
						Agreement: shardcast.Agreement{App: "place." + on.String() + ":"},
						Options:   shardcast.Options{Handler: h, OnEvent: ev}})
				})
			perNode := map[string]int{}
			for _, b := range fleet.Brokers {
				nodes := b.(*Broker).SubscribedOn()
				assert.Len(t, nodes, 3, "one node per shard")
				for addr := range nodes {
					perNode[addr]++
					if on == Replicas {
						assert.False(t, isMaster(addr), "Replicas subscribed on master %s", addr)
					}
				}
			}
			want := 6 / 2
			if on == AllNodes {
				want = 6 / 3
			}
			for addr, n := range perNode {
				assert.InDelta(t, want, n, 1, "brokers subscribed on %s", addr)
			}
			wantNodes := 6
			if on == AllNodes {
				wantNodes = 9
			}
			assert.Len(t, perNode, wantNodes, "every candidate node used")
			// A connection a broker just opened may not have confirmed its
			// subscriptions yet, nor one it closed have gone.
			waitFor(10*time.Second, func() bool { return maps.Equal(perNode, shardSubscribers(t, c)) })
			assert.Equal(t, perNode, shardSubscribers(t, c), "the servers count the same subscribe connections")
			fleet.WaitPublished(3000)
			fig := fleet.Finish(faultTolerance)
			brokertest.AssertClean(t, fig)
			assert.Zero(t, fig.Lost, "nothing lost without a fault")
			t.Logf("FIGURE SubscribeOn %v: per node %v; %v", on, perNode, fig)
		})
	}
}

// TestSubscribeOnReplicaFaults: with Replicas, a replica that carries
// subscriptions is SIGKILLed, another frozen, and then a master, while three brokers
// publish to every channel: every loss lies inside a window the
// subscriber reported, nothing is delivered twice or out of order, and
// the brokers deliver again within 5 s of the replica's death and 10 s of
// the master's.
func TestSubscribeOnReplicaFaults(t *testing.T) {
	c := replicaCluster(t)
	ctx := testCtx(t, 120*time.Second)
	channels := numbered("rf.", 200)
	fleet := brokertest.NewFaultFleet(t, 3, channels, brokertest.FaultFleetOptions{},
		func(h shardcast.Handler, ev func(shardcast.Event)) shardcast.Broker {
			return newBroker(t, Config{Addrs: c.Seeds(), SubscribeOn: Replicas, Conn: faultConn,
				TopologyInterval: time.Second, Agreement: shardcast.Agreement{App: "rf:"},
				Options: shardcast.Options{Handler: h, OnEvent: ev}})
		})
	fleet.WaitPublished(2000)
	node := func(addr string) *redistest.Server {
		for _, n := range c.Nodes() {
			if n.Addr() == addr {
				return n
			}
		}
		t.Fatalf("no node %s", addr)
		return nil
	}
	first := fleet.Brokers[0].(*Broker)

	// A replica broker 0 subscribes on.
	var replica string
	for addr := range first.SubscribedOn() {
		replica = addr
		break
	}
	killed := time.Now()
	require.NoError(t, node(replica).Kill())
	require.True(t, waitFor(5*time.Second, func() bool {
		_, still := first.SubscribedOn()[replica]
		return !still && fleet.Delivering(killed)
	}), "not delivering on another node within 5 s of the replica's death")
	t.Logf("FIGURE replica SIGKILL: delivering again after %v", time.Since(killed).Round(time.Millisecond))
	fleet.WaitPublished(2000)

	// A replica frozen (SIGSTOP): its connection answers nothing, and the
	// broker moves to another node of the shard.
	var frozen string
	for addr := range first.SubscribedOn() {
		if addr != replica && !sameShard(first.slotMap(), addr, replica) {
			frozen = addr
			break
		}
	}
	require.NotEmpty(t, frozen)
	froze := time.Now()
	require.NoError(t, node(frozen).Pause())
	require.True(t, waitFor(5*time.Second, func() bool {
		_, still := first.SubscribedOn()[frozen]
		return !still && fleet.Delivering(froze)
	}), "not delivering on another node within 5 s of freezing the replica")
	t.Logf("FIGURE replica SIGSTOP: delivering again after %v", time.Since(froze).Round(time.Millisecond))
	require.NoError(t, node(frozen).Resume())
	fleet.WaitPublished(2000)

	// A master whose shard still has both replicas.
	masters, err := c.Masters(ctx)
	require.NoError(t, err)
	var victim *redistest.Server
	for _, m := range masters {
		reps, err := c.ReplicasOf(ctx, m)
		require.NoError(t, err)
		if !slices.ContainsFunc(reps, func(s *redistest.Server) bool { return s.Addr() == replica || s.Addr() == frozen }) {
			victim = m
			break
		}
	}
	require.NotNil(t, victim)
	killed = time.Now()
	require.NoError(t, victim.Kill())
	require.True(t, waitFor(10*time.Second, func() bool { return fleet.Delivering(killed) }),
		"not delivering within 10 s of the master's death")
	t.Logf("FIGURE master SIGKILL: delivering again after %v", time.Since(killed).Round(time.Millisecond))
	fleet.WaitPublished(2000)

	fig := fleet.Finish(faultTolerance)
	brokertest.AssertClean(t, fig)
	fleet.LogEvents()
	assert.NotZero(t, fleet.Interrupted(), "the faults were reported")
	for _, b := range fleet.Brokers {
		for addr := range b.(*Broker).SubscribedOn() {
			assert.NotEqual(t, replica, addr, "still on the dead replica")
		}
	}
	t.Logf("FIGURE SubscribeOn Replicas, replica then master SIGKILLed: %v", fig)
}

// slotMap returns the slot map the broker follows.
func (b *Broker) slotMap() shardcast.SlotMap {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.slots
}

// TestAvoidExpires: a node the engine reports in trouble is avoided for
// avoidFor with SubscribeOn other than Masters, then forgotten; with
// Masters nothing is recorded.
func TestAvoidExpires(t *testing.T) {
	b := &Broker{avoid: map[string]time.Time{}}
	b.cfg.SubscribeOn = Masters
	b.troubleAt("r1:1")
	assert.Empty(t, b.avoid, "Masters: no node is avoided")

	b.cfg.SubscribeOn = Replicas
	b.troubleAt("r1:1")
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	assert.True(t, b.avoidingLocked(now)("r1:1"))
	assert.False(t, b.avoidingLocked(now)("r2:1"))
	assert.False(t, b.avoidingLocked(now.Add(avoidFor+time.Millisecond))("r1:1"), "forgotten after avoidFor")
	assert.Empty(t, b.avoid)
}
