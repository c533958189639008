package redistest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Sentinel tests each own their servers and run in parallel: they spend
// their time waiting for Sentinel's timers (1 s pings, 2 s hellos).

func TestSentinelGroupStartsConsistent(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	began := time.Now()
	r := StartReplicated(t, 2)
	replicated := time.Since(began)
	s := StartSentinels(t, 3, SentinelGroup{Name: "g1", Servers: r})
	t.Logf("master+2 replicas ready in %v, 3 sentinels in %v more", replicated.Round(time.Millisecond),
		(time.Since(began) - replicated).Round(time.Millisecond))

	require.Len(t, r.Nodes(), 3)
	for _, n := range r.Replicas() {
		role, master, err := n.Role(ctx)
		require.NoError(t, err)
		assert.Equal(t, "slave", role)
		assert.Equal(t, r.Master().Addr(), master)
	}
	require.Len(t, s.Addrs(), 3)
	addr, err := s.MasterAddr(ctx, "g1")
	require.NoError(t, err)
	assert.Equal(t, r.Master().Addr(), addr)
	assert.Equal(t, []string{addr, addr, addr}, s.Masters(ctx, "g1"))
	assert.Equal(t, "redis+sentinel://"+strings.Join(s.Addrs(), ",")+"/g1", s.URL("g1"))
	m, err := s.Master(ctx, "g1")
	require.NoError(t, err)
	assert.Same(t, r.Master(), m)

	// Each Sentinel counts the two replicas and the two other Sentinels.
	for _, sn := range s.Nodes() {
		reply, err := sn.Do(ctx, "SENTINEL", "MASTER", "g1")
		require.NoError(t, err)
		m := fieldMap(reply)
		assert.Equal(t, "2", m["num-slaves"], "sentinel %s", sn.Addr())
		assert.Equal(t, "2", m["num-other-sentinels"], "sentinel %s", sn.Addr())
		assert.Equal(t, "2", m["quorum"])
	}
	_, err = s.MasterAddr(ctx, "nosuch")
	assert.ErrorIs(t, err, ErrNoSentinel)
}

// subscribeSwitches subscribes to +switch-master on every Sentinel.
func subscribeSwitches(t *testing.T, ctx context.Context, s *Sentinels) []*Conn {
	t.Helper()
	var subs []*Conn
	for _, sn := range s.Nodes() {
		c, err := sn.Dial(ctx)
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		reply, err := c.Do(ctx, "SUBSCRIBE", SwitchMasterChannel)
		require.NoError(t, err)
		require.Equal(t, []any{"subscribe", SwitchMasterChannel, int64(1)}, reply)
		subs = append(subs, c)
	}
	return subs
}

// receiveSwitch reads the next message on a +switch-master subscription.
func receiveSwitch(t *testing.T, ctx context.Context, c *Conn) SwitchMaster {
	t.Helper()
	push, err := c.Receive(ctx)
	require.NoError(t, err)
	msg, ok := push.([]any)
	require.True(t, ok, "push %v", push)
	require.Len(t, msg, 3)
	require.Equal(t, "message", msg[0])
	require.Equal(t, SwitchMasterChannel, msg[1])
	payload, _ := msg[2].(string)
	t.Logf("+switch-master payload: %q", payload)
	sw, err := ParseSwitchMaster(payload)
	require.NoError(t, err)
	return sw
}

// waitGetMasterAddrMoves returns how long after its call the first
// Sentinel's GET-MASTER-ADDR-BY-NAME stopped naming old.
func waitGetMasterAddrMoves(t *testing.T, ctx context.Context, s *Sentinels, name, old string) time.Duration {
	t.Helper()
	began := time.Now()
	require.NoError(t, poll(ctx, func(ctx context.Context) error {
		if addr, err := masterAddrFrom(ctx, s.Nodes()[0], name); err != nil || addr == old {
			return fmt.Errorf("still %s (%v)", addr, err)
		}
		return nil
	}))
	return time.Since(began)
}

// switchesUntil reads +switch-master messages until one names final as
// the new master, and returns them all. A failover whose first elected
// leader loses to a later one is announced twice.
func switchesUntil(t *testing.T, ctx context.Context, c *Conn, final string) []SwitchMaster {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var seen []SwitchMaster
	for {
		sw := receiveSwitch(t, ctx, c)
		seen = append(seen, sw)
		if sw.New == final {
			return seen
		}
	}
}

func TestSentinelFailoverAnnouncesSwitch(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 90*time.Second)
	r := StartReplicated(t, 2)
	s := StartSentinels(t, 3, SentinelGroup{Name: "g1", Servers: r})
	old := r.Master().Addr()
	subs := subscribeSwitches(t, ctx, s)

	began := time.Now()
	require.NoError(t, s.Failover(ctx, "g1"))
	early := waitGetMasterAddrMoves(t, ctx, s, "g1", old)
	newAddr, err := s.WaitSwitch(ctx, "g1", old)
	require.NoError(t, err)
	switched := time.Since(began)
	t.Logf("GET-MASTER-ADDR-BY-NAME moved after %v, switch complete after %v",
		early.Round(time.Millisecond), switched.Round(time.Millisecond))
	require.NotEqual(t, old, newAddr)
	require.NotNil(t, r.Node(newAddr))

	// Every Sentinel announces the switch, the one that led it and the
	// others once its hello reaches them; WaitSwitch returns after all
	// of them.
	for i, c := range subs {
		sw := receiveSwitch(t, ctx, c)
		assert.Equal(t, SwitchMaster{Name: "g1", Old: old, New: newAddr}, sw, "sentinel %d", i)
	}
	role, _, err := r.Node(newAddr).Role(ctx)
	require.NoError(t, err)
	assert.Equal(t, "master", role)

	// The old master lives on as a master until Sentinel converts it.
	require.NoError(t, r.WaitLinked(ctx, r.Node(newAddr)))
	t.Logf("SENTINEL FAILOVER: switch complete in %v, old master %s a replica of the new one after %v",
		switched.Round(time.Millisecond), old, time.Since(began).Round(time.Millisecond))
}

func TestSentinelKillMasterFailsOver(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 90*time.Second)
	r := StartReplicated(t, 2)
	s := StartSentinels(t, 3, SentinelGroup{Name: "g1", Servers: r})
	subs := subscribeSwitches(t, ctx, s)

	began := time.Now()
	old, newAddr, err := s.KillMaster(ctx, "g1")
	require.NoError(t, err)
	took := time.Since(began)
	assert.Equal(t, r.Master(), old)
	assert.NotEqual(t, old.Addr(), newAddr)
	t.Logf("SIGKILL of the master: switch complete in %v", took.Round(time.Millisecond))
	// down-after 2 s, then agreement, election and promotion; the bound
	// leaves room for a loaded machine.
	assert.Less(t, took, 20*time.Second)
	for i, c := range subs {
		seen := switchesUntil(t, ctx, c, newAddr)
		if len(seen) > 1 {
			t.Logf("sentinel %d announced %d switches: %v", i, len(seen), seen)
			for _, sn := range s.Nodes() {
				log, _ := os.ReadFile(filepath.Join(sn.Dir(), "redis.log"))
				t.Logf("=== sentinel %s log ===\n%s", sn.Addr(), log)
			}
		}
		assert.Equal(t, SwitchMaster{Name: "g1", Old: old.Addr(), New: newAddr}, seen[0], "first +switch-master of sentinel %d", i)
	}

	// The old master comes back as a master with no data and is turned
	// into a replica of the new one.
	began = time.Now()
	require.NoError(t, old.Restart(ctx))
	require.NoError(t, r.WaitLinked(ctx, r.Node(newAddr)))
	t.Logf("restarted old master is a linked replica after %v", time.Since(began).Round(time.Millisecond))
}

func TestSentinelTwoGroupsFailOverIndependently(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 90*time.Second)
	a := StartReplicated(t, 1)
	b := StartReplicated(t, 1)
	s := StartSentinels(t, 3, SentinelGroup{Name: "a", Servers: a}, SentinelGroup{Name: "b", Servers: b})
	oldA, oldB := a.Master().Addr(), b.Master().Addr()

	began := time.Now()
	require.NoError(t, s.Failover(ctx, "a"))
	newA, err := s.WaitSwitch(ctx, "a", oldA)
	require.NoError(t, err)
	t.Logf("group a: SENTINEL FAILOVER switched in %v", time.Since(began).Round(time.Millisecond))
	assert.Equal(t, a.Replicas()[0].Addr(), newA)
	assert.Equal(t, []string{oldB, oldB, oldB}, s.Masters(ctx, "b"), "b must not move")

	began = time.Now()
	killed, newB, err := s.KillMaster(ctx, "b")
	require.NoError(t, err)
	t.Logf("group b: SIGKILL switched in %v", time.Since(began).Round(time.Millisecond))
	assert.Equal(t, b.Master(), killed)
	assert.Equal(t, b.Replicas()[0].Addr(), newB)
	assert.Equal(t, []string{newA, newA, newA}, s.Masters(ctx, "a"), "a must not move again")
	role, _, err := a.Node(newA).Role(ctx)
	require.NoError(t, err)
	assert.Equal(t, "master", role)
}
