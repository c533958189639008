package redistest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardcast/shardcast/internal/resp"
)

// Cluster tests each own a cluster and run in parallel: they spend most of
// their time waiting for Redis's timers, not using the CPU.

func TestClusterThreeByOneIsReady(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	c := StartCluster(t, 3, 1)
	require.Len(t, c.Nodes(), 6)
	assert.Len(t, c.Seeds(), 6)

	// Every node, replicas included, reports the same complete map with
	// redis-cli's split and one replica per master.
	want := redisCLISlotSplit(3)
	for _, n := range c.Nodes() {
		owners, err := n.clusterSlots(ctx)
		require.NoError(t, err)
		require.Len(t, owners, 3, "node %s", n.Addr())
		covered := 0
		for i, o := range owners {
			assert.Equal(t, want[i], o.slots)
			assert.Len(t, o.replicas, 1, "CLUSTER SLOTS on %s must list the replica of %s", n.Addr(), o.master)
			covered += int(o.slots.Last) - int(o.slots.First) + 1
		}
		assert.Equal(t, SlotCount, covered)
		info, err := n.Info(ctx, "cluster")
		require.NoError(t, err)
		assert.Equal(t, "1", info["cluster_enabled"])
	}

	masters, err := c.Masters(ctx)
	require.NoError(t, err)
	require.Len(t, masters, 3)
	for i, m := range masters {
		owner, err := c.MasterOfSlot(ctx, want[i].First)
		require.NoError(t, err)
		assert.Same(t, m, owner, "Masters must be ordered by their lowest slot")
		owner, err = c.MasterOfSlot(ctx, want[i].Last)
		require.NoError(t, err)
		assert.Same(t, m, owner)

		replicas, err := c.ReplicasOf(ctx, m)
		require.NoError(t, err)
		require.Len(t, replicas, 1)
		info, err := replicas[0].Info(ctx, "replication")
		require.NoError(t, err)
		assert.Equal(t, "slave", info["role"])
		assert.Equal(t, "up", info["master_link_status"])
		assert.Equal(t, strconv.Itoa(m.Port()), info["master_port"])
	}
	all, err := c.Replicas(ctx)
	require.NoError(t, err)
	assert.Len(t, all, 3)
	_, err = c.MasterOfSlot(ctx, SlotCount)
	assert.Error(t, err)
	_, err = c.ReplicasOf(ctx, StartStandalone(t))
	assert.ErrorIs(t, err, ErrNotMember)

	// The live server's KEYSLOT is the reference the library's CRC16 is
	// checked against; check the harness path with known values and a
	// reference implementation over many keys.
	keys := []string{"foo", "123456789", "{user1000}.following", "{user1000}.followers",
		"foo{}{bar}", "foo{{bar}}zap", "foo{bar}{zap}", "{}", "", "ümlaut{ß}"}
	for range 3000 {
		keys = append(keys, randomKey())
	}
	slots, err := masters[0].KeySlots(ctx, keys...)
	require.NoError(t, err)
	require.Len(t, slots, len(keys))
	assert.Equal(t, uint16(12182), slots[0])
	assert.Equal(t, uint16(0x31C3), slots[1], "CRC16/XMODEM check value of 123456789")
	assert.Equal(t, slots[2], slots[3], "hash tags pick the slot")
	for i, k := range keys {
		require.Equal(t, referenceKeySlot(k), slots[i], "key %q", k)
	}
	_, err = StartStandalone(t).KeySlots(ctx, "foo")
	assert.Error(t, err, "KEYSLOT needs a cluster node")
}

func TestClusterOneMasterNoReplica(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	c := StartCluster(t, 1, 0)
	owners, err := c.Nodes()[0].clusterSlots(ctx)
	require.NoError(t, err)
	require.Len(t, owners, 1)
	assert.Equal(t, SlotRange{0, SlotCount - 1}, owners[0].slots)
	replicas, err := c.Replicas(ctx)
	require.NoError(t, err)
	assert.Empty(t, replicas)
}

func TestSharedClusterOutsideATest(t *testing.T) {
	t.Parallel()
	_, _, err := StartSharedCluster(0, 1)
	require.ErrorIs(t, err, ErrBadShape)
	_, _, err = StartSharedCluster(33, 1)
	require.ErrorIs(t, err, ErrBadShape)

	c, stop, err := StartSharedCluster(1, 0)
	require.NoError(t, err)
	defer stop()
	ctx := testCtx(t, 60*time.Second)
	n := c.Nodes()[0]
	owners, err := n.clusterSlots(ctx)
	require.NoError(t, err)
	require.Len(t, owners, 1)
	pid, dir := n.PID(), filepath.Dir(n.Dir())
	require.NotZero(t, pid)

	stop()
	stop()
	assert.True(t, processGone(pid), "stop must kill the nodes")
	_, err = os.Stat(dir)
	assert.ErrorIs(t, err, os.ErrNotExist, "stop must remove the directories")
}

func TestClusterFailoverAfterKill(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	c := StartCluster(t, 3, 1)
	old, err := c.MasterOfSlot(ctx, 0)
	require.NoError(t, err)
	replicas, err := c.ReplicasOf(ctx, old)
	require.NoError(t, err)
	require.Len(t, replicas, 1)

	killed := time.Now()
	require.NoError(t, old.Kill())
	assert.NotContains(t, c.Seeds(), old.Addr())
	promoted, err := c.WaitFailover(ctx, old)
	require.NoError(t, err)
	t.Logf("failover after SIGKILL took %v", time.Since(killed).Round(time.Millisecond))
	assert.Same(t, replicas[0], promoted, "the killed master's replica must take over")

	owner, err := c.MasterOfSlot(ctx, 0)
	require.NoError(t, err)
	assert.Same(t, promoted, owner)
	for _, n := range c.Nodes() {
		if n == old {
			continue
		}
		owners, err := n.clusterSlots(ctx)
		require.NoError(t, err)
		assert.NotContains(t, slotMapKey(owners), old.ID(), "%s still lists the dead master", n.Addr())
	}
	_, err = c.WaitFailover(ctx, old)
	require.NoError(t, err, "asking again after the failover still finds the successor")

	// The old master comes back as a replica of its successor.
	require.NoError(t, c.RestartNode(ctx, old))
	info, err := old.Info(ctx, "replication")
	require.NoError(t, err)
	assert.Equal(t, "slave", info["role"])
	assert.Equal(t, strconv.Itoa(promoted.Port()), info["master_port"])
	again, err := c.ReplicasOf(ctx, promoted)
	require.NoError(t, err)
	assert.Equal(t, []*Server{old}, again)

	_, err = c.WaitFailover(ctx, old)
	assert.ErrorIs(t, err, ErrNotMaster, "a replica has no slots to fail over")
}

func TestClusterPauseResume(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	c := StartCluster(t, 3, 1)
	old, err := c.MasterOfSlot(ctx, 5461)
	require.NoError(t, err)

	paused := time.Now()
	require.NoError(t, old.Pause())
	assert.True(t, old.Paused())
	assert.True(t, old.Running())
	assert.NotContains(t, c.Seeds(), old.Addr())
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	_, err = old.Do(short, "PING")
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)

	promoted, err := c.WaitFailover(ctx, old)
	require.NoError(t, err)
	t.Logf("failover after SIGSTOP took %v", time.Since(paused).Round(time.Millisecond))
	assert.NotSame(t, old, promoted)

	// Thawed, the old master learns it was replaced and follows the new one.
	require.NoError(t, old.Resume())
	require.NoError(t, c.WaitConverged(ctx))
	info, err := old.Info(ctx, "replication")
	require.NoError(t, err)
	assert.Equal(t, "slave", info["role"])
	assert.Equal(t, strconv.Itoa(promoted.Port()), info["master_port"])
	assert.Contains(t, c.Seeds(), old.Addr())
}

func TestClusterMoveSlot(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	c := StartCluster(t, 3, 1)
	const channel = "{foo}"
	slot, err := c.Nodes()[0].KeySlots(ctx, channel)
	require.NoError(t, err)
	src, err := c.MasterOfSlot(ctx, slot[0])
	require.NoError(t, err)
	masters, err := c.Masters(ctx)
	require.NoError(t, err)
	dst := masters[0]
	require.NotSame(t, src, dst)

	// A key in the slot must travel with it; a sharded subscriber on the
	// old owner must be told the slot left.
	_, err = src.Do(ctx, "SET", "{foo}.k", "v")
	require.NoError(t, err)
	sub, err := src.dial(ctx)
	require.NoError(t, err)
	defer sub.close()
	replies, err := sub.do(ctx, []string{"SSUBSCRIBE", channel})
	require.NoError(t, err)
	require.Equal(t, []any{"ssubscribe", channel, int64(1)}, replies[0])

	require.NoError(t, c.MoveSlot(ctx, slot[0], dst))

	push, err := sub.receive(ctx)
	require.NoError(t, err)
	assert.Equal(t, []any{"sunsubscribe", channel, int64(0)}, push)
	for _, n := range c.Nodes() {
		owners, err := n.clusterSlots(ctx)
		require.NoError(t, err)
		assert.Equal(t, dst.ID(), ownerOf(owners, slot[0]), "CLUSTER SLOTS on %s", n.Addr())
		assert.Equal(t, src.ID(), ownerOf(owners, slot[0]-1), "neighbouring slots stay")
	}
	owner, err := c.MasterOfSlot(ctx, slot[0])
	require.NoError(t, err)
	assert.Same(t, dst, owner)
	v, err := dst.Do(ctx, "GET", "{foo}.k")
	require.NoError(t, err)
	assert.Equal(t, "v", v, "MoveSlot must migrate the slot's keys")

	_, err = src.Do(ctx, "SPUBLISH", channel, "hello")
	moved, ok := resp.IsServerError(err)
	require.True(t, ok, "%v", err)
	assert.Equal(t, fmt.Sprintf("MOVED %d %s", slot[0], dst.Addr()), moved.Msg)
	before, err := dst.CommandStats(ctx)
	require.NoError(t, err)
	n, err := dst.Do(ctx, "SPUBLISH", channel, "hello")
	require.NoError(t, err)
	assert.Equal(t, int64(0), n)
	after, err := dst.CommandStats(ctx)
	require.NoError(t, err)
	assert.Equal(t, before["spublish"]+1, after["spublish"])

	require.NoError(t, c.MoveSlot(ctx, slot[0], dst), "moving to the owner is a no-op")
	replicas, err := c.ReplicasOf(ctx, dst)
	require.NoError(t, err)
	require.Len(t, replicas, 1)
	assert.ErrorIs(t, c.MoveSlot(ctx, 0, replicas[0]), ErrNotMaster)
	assert.Error(t, c.MoveSlots(ctx, 10, 9, dst))
}

func TestClusterAddMoveRemoveMaster(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	c := StartCluster(t, 3, 0)
	first, err := c.Masters(ctx)
	require.NoError(t, err)

	added, err := c.AddMaster(ctx)
	require.NoError(t, err)
	require.Len(t, c.Nodes(), 4)
	for _, n := range c.Nodes() {
		entries, err := n.clusterNodes(ctx)
		require.NoError(t, err)
		require.NoError(t, requireMembers(n, entries, []*Server{added}), "every node must know the new one")
	}
	masters, err := c.Masters(ctx)
	require.NoError(t, err)
	assert.Equal(t, append(first, added), masters, "an empty master is listed after those with slots")

	assert.ErrorIs(t, c.RemoveNode(ctx, first[0]), ErrNodeInUse, "a master with slots cannot be removed")

	require.NoError(t, c.MoveSlots(ctx, 100, 1099, added))
	for _, s := range []uint16{100, 600, 1099} {
		owner, err := c.MasterOfSlot(ctx, s)
		require.NoError(t, err)
		assert.Same(t, added, owner, "slot %d", s)
	}
	for _, s := range []uint16{99, 1100} {
		owner, err := c.MasterOfSlot(ctx, s)
		require.NoError(t, err)
		assert.Same(t, first[0], owner, "slot %d", s)
	}

	require.NoError(t, c.MoveSlots(ctx, 100, 1099, first[0]))
	require.NoError(t, c.RemoveNode(ctx, added))
	assert.False(t, added.Running())
	require.Len(t, c.Nodes(), 3)
	for _, n := range c.Nodes() {
		entries, err := n.clusterNodes(ctx)
		require.NoError(t, err)
		assert.Len(t, entries, 3, "%s must have forgotten the removed node", n.Addr())
		for _, e := range entries {
			assert.NotEqual(t, added.ID(), e.id)
		}
	}
	assert.ErrorIs(t, c.RemoveNode(ctx, added), ErrNotMember)
}

// referenceKeySlot is Redis's key → slot rule with a bitwise CRC16/XMODEM,
// written independently of the library's table-driven one.
func referenceKeySlot(key string) uint16 {
	if open := strings.IndexByte(key, '{'); open >= 0 {
		if end := strings.IndexByte(key[open+1:], '}'); end > 0 {
			key = key[open+1 : open+1+end]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc % SlotCount
}

// randomKey draws keys of varied length and bytes, braces included.
func randomKey() string {
	const alphabet = "ab{}z09.:-_\x00\xff"
	b := make([]byte, rand.IntN(24))
	for i := range b {
		b[i] = alphabet[rand.IntN(len(alphabet))]
	}
	return string(b)
}
