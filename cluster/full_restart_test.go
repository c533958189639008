package cluster

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestShardMemory: a replica a slot map leaves out is still known as its
// master's, so that a move to it is judged a failover; a node listed again
// is recorded afresh; a move to a node that owned no slot is judged a
// failover whatever the maps say; and a move between two masters that
// both owned slots is not.
func TestShardMemory(t *testing.T) {
	slotOf := func(p int) uint16 { return uint16(p) }
	full := shardcast.SlotMap{Ranges: []shardcast.SlotRange{
		{Start: 0, End: 99, Master: "m1:1", Replicas: []string{"r1:1"}},
		{Start: 100, End: 199, Master: "m2:1", Replicas: []string{"r2:1"}},
	}}
	bare := shardcast.SlotMap{Ranges: []shardcast.SlotRange{ // after a full restart
		{Start: 0, End: 99, Master: "m1:1"},
		{Start: 100, End: 199, Master: "m2:1"},
	}}
	promoted := shardcast.SlotMap{Ranges: []shardcast.SlotRange{ // r1 took over, m1 not yet listed
		{Start: 0, End: 99, Master: "r1:1"},
		{Start: 100, End: 199, Master: "m2:1"},
	}}
	assigned := make(shardcast.Assignment, 200) // partition p is slot p here
	assigned[5], assigned[150] = "m1:1", "m2:1"
	var m shardMemory
	m = m.update(full)
	m = m.update(bare)
	assert.Equal(t, shardMemory{"r1:1": "m1:1", "r2:1": "m2:1"}, m, "replicas left out are remembered")

	failover := m.classifier(assigned, bare, promoted, slotOf)
	assert.True(t, failover(partitionMove{Partition: 5, From: "m1:1", To: "r1:1"}),
		"the map before names no replica, the memory does")
	assert.False(t, wasReplica(bare, 5, "r1:1"), "(the map alone says no)")
	assert.False(t, failover(partitionMove{Partition: 5, From: "m1:1", To: "m2:1"}), "a migration to another shard")
	assert.True(t, shardMemory{}.classifier(assigned, bare, promoted, slotOf)(partitionMove{Partition: 5, From: "m1:1", To: "r1:1"}),
		"with no memory and no map naming the replica: the new master owned no slot before")
	assert.True(t, failover(partitionMove{Partition: 5, From: "m1:1", To: "new:1"}),
		"slots moved to a master that owned none are fenced too (the price of erring on the safe side)")
	assert.False(t, failover(partitionMove{Partition: 5, From: "", To: "r1:1"}), "no old master")

	m = m.update(promoted)
	assert.NotContains(t, m, "r1:1", "a master is nobody's replica")
	demoted := shardcast.SlotMap{Ranges: []shardcast.SlotRange{
		{Start: 0, End: 99, Master: "r1:1", Replicas: []string{"m1:1"}},
		{Start: 100, End: 199, Master: "m2:1", Replicas: []string{"r2:1"}},
	}}
	moved := slices.Clone(assigned)
	moved[5] = "r1:1"
	back := m.classifier(moved, demoted, bare, slotOf) // and back again, m1 listed as r1's replica before
	assert.True(t, back(partitionMove{Partition: 5, From: "r1:1", To: "m1:1"}))
	m = m.update(demoted)
	assert.Equal(t, "r1:1", m["m1:1"], "recorded afresh")
	// The old master already listed as the new one's replica is enough.
	assert.True(t, shardMemory{}.classifier(assigned, bare, demoted, slotOf)(partitionMove{Partition: 5, From: "m1:1", To: "r1:1"}))
	// A stale view read before the move back still names m1 as the owner,
	// but the broker did not follow it (confirmMoves): what counts is that
	// m1 carried no partition.
	assert.True(t, shardMemory{}.classifier(moved, full, bare, slotOf)(partitionMove{Partition: 5, From: "r1:1", To: "m1:1"}),
		"judged by the assignment, not by a stale map")
}

// TestFailoverAfterFullRestart: right after every node of the cluster
// restarted (no data, so every replica's replication offset is 0), CLUSTER
// SLOTS names no replica; a manual failover then must still be judged one,
// so that the copies the demoted master's shard relays are fenced off:
// each message is delivered once. Without the shard memory the move looked
// like a migration (chaos soak: 19 duplicates after restartall + CLUSTER
// FAILOVER FORCE).
func TestFailoverAfterFullRestart(t *testing.T) {
	r := newFailoverRig(t)
	ctx := testCtx(t, 60*time.Second)
	victim, promoted, parts := r.victimAndReplica(t, ctx)

	for _, n := range r.c.Nodes() {
		require.NoError(t, n.Kill())
	}
	for _, n := range r.c.Nodes() {
		require.NoError(t, n.Restart(ctx))
	}
	require.NoError(t, r.c.WaitConverged(ctx))
	// The scenario: the map the broker holds names no replica of the
	// victim. If Redis already lists it (its offset moved), the test
	// would prove nothing: skip rather than pass.
	listed := func() bool {
		r.sub.mu.Lock()
		defer r.sub.mu.Unlock()
		for _, rg := range r.sub.slots.Ranges {
			if rg.Master == victim.Addr() {
				return slices.Contains(rg.Replicas, promoted.Addr())
			}
		}
		return true
	}
	require.True(t, waitFor(30*time.Second, func() bool {
		return slices.Equal(parts, sortedCopy(r.sub.Masters()[victim.Addr()]))
	}), "the victim's partitions are not back on it after the restart")
	r.rec.waitSilentSince(t, r.channels, time.Now(), 30*time.Second) // every channel delivers again
	if listed() {
		t.Skip("CLUSTER SLOTS already lists the replica after the restart: the scenario did not arise")
	}

	moves := r.countMoves()
	_, err := promoted.Do(ctx, "CLUSTER", "FAILOVER", "FORCE")
	require.NoError(t, err)
	r.waitMoved(t, parts, promoted)
	moves.requireFailovers(t, len(parts), "every moved partition is judged a failover")
	r.rec.waitSilentSince(t, r.channels, time.Now(), 30*time.Second)
	settle(t, r.rec, r.feed, r.channels)
	rep := checkDelivery(t, r.rec, r.feed, r.channels)
	t.Logf("FIGURE failover after a full restart: %d partitions moved; duplicates %d, reordered %d, stale copies dropped %d",
		len(parts), rep.duplicates, rep.reordered, r.sub.Stats().Stale)
}

// TestFailoverBackAndForth: a manual failover, and a forced one back to
// the demoted master seconds later. The second move's new master owned no
// slot, but the broker's map may not name it as a replica yet (a master
// demoted a moment ago is left out until its offset is gossiped): it must
// still be judged a failover, so that the copies its shard relays are
// fenced off (chaos soak: 12 duplicates after this sequence, seed 92).
// Judged by the raw map before the move, the second move was taken for a
// migration whenever a poll in between had read a node's stale view that
// still named the victim as the owner (1 run in 3 or 4: the assertion on
// failover moves failed); judged by the assignment, 5 of 5 pass.
func TestFailoverBackAndForth(t *testing.T) {
	r := newFailoverRig(t)
	ctx := testCtx(t, 60*time.Second)
	victim, promoted, parts := r.victimAndReplica(t, ctx)

	moves := r.countMoves()
	_, err := promoted.Do(ctx, "CLUSTER", "FAILOVER")
	require.NoError(t, err)
	r.waitMoved(t, parts, promoted)
	require.True(t, waitFor(30*time.Second, func() bool {
		reps, err := r.c.ReplicasOf(ctx, promoted)
		return err == nil && slices.ContainsFunc(reps, func(s *redistest.Server) bool { return s.Addr() == victim.Addr() })
	}), "the demoted master never became the new one's replica")
	_, err = victim.Do(ctx, "CLUSTER", "FAILOVER", "FORCE")
	require.NoError(t, err)
	r.waitMoved(t, parts, victim)
	moves.requireFailovers(t, 2*len(parts), "both moves are judged failovers")
	r.rec.waitSilentSince(t, r.channels, time.Now(), 30*time.Second)
	settle(t, r.rec, r.feed, r.channels)
	rep := checkDelivery(t, r.rec, r.feed, r.channels)
	t.Logf("FIGURE failover and back: %d partitions moved twice; duplicates %d, reordered %d, stale copies dropped %d",
		len(parts), rep.duplicates, rep.reordered, r.sub.Stats().Stale)
}

// moveCount holds the subscriber's move counters at a point in time.
type moveCount struct {
	b                                *Broker
	failovers, migrations, ownerless uint64
}

func (r *failoverRig) countMoves() moveCount {
	return moveCount{b: r.sub, failovers: r.sub.failoverMoves.Load(), migrations: r.sub.migrationMoves.Load(),
		ownerless: r.sub.ownerlessMoves.Load()}
}

// requireFailovers checks the moves since c: none from one master to
// another judged a migration, and at least want judged failovers. More is
// allowed: a poll that read a node's stale view may move a partition back
// and forth once more, and each of those moves must be fenced too. (A
// failover may also pass through a map where the slots have no master: the
// move to no master is fenced, the move from it needs no fence.)
//
// The counters are added after the new assignment is installed (which is
// what waitMoved sees), so it waits for them.
func (c moveCount) requireFailovers(t *testing.T, want int, msg string) {
	t.Helper()
	waitFor(10*time.Second, func() bool { return c.b.failoverMoves.Load()-c.failovers >= uint64(want) })
	failovers := c.b.failoverMoves.Load() - c.failovers
	migrations := c.b.migrationMoves.Load() - c.migrations
	ownerless := c.b.ownerlessMoves.Load() - c.ownerless
	t.Logf("moves since the failover: %d judged failovers, %d judged migrations, %d other moves from or to no master (want at least %d failovers)",
		failovers, migrations, ownerless, want)
	assert.Zero(t, migrations, msg)
	assert.GreaterOrEqual(t, failovers, uint64(want), msg)
}

// victimAndReplica returns the rig's victim master, the replica that is to
// take over from it, and the partitions it carries.
func (r *failoverRig) victimAndReplica(t *testing.T, ctx context.Context) (victim, replica *redistest.Server, parts []int) {
	t.Helper()
	victim, parts = r.victim(t)
	replicas, err := r.c.ReplicasOf(ctx, victim)
	require.NoError(t, err)
	require.NotEmpty(t, replicas)
	return victim, replicas[0], parts
}

// waitMoved waits until the subscriber carries parts on to.
func (r *failoverRig) waitMoved(t *testing.T, parts []int, to *redistest.Server) {
	t.Helper()
	require.True(t, waitFor(30*time.Second, func() bool {
		return slices.Equal(parts, sortedCopy(r.sub.Masters()[to.Addr()]))
	}), "the broker never moved partitions %v to %s", parts, to.Addr())
}
