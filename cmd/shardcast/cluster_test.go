package main

import (
	"context"
	"encoding/json"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/cluster"
	"github.com/shardcast/shardcast/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// slotOwners reads CLUSTER SLOTS from s and returns, per slot, the
// "ip:port" of its master; unowned slots are "". It parses the reply
// itself rather than through cluster.ParseSlots, so that the
// tests compare inspect with an independent reading.
func slotOwners(t *testing.T, ctx context.Context, s *redistest.Server) []string {
	t.Helper()
	reply, err := s.Do(ctx, "CLUSTER", "SLOTS")
	require.NoError(t, err)
	owners := make([]string, 16384) // a cluster's hash slots
	for _, e := range reply.([]any) {
		entry := e.([]any)
		master := entry[2].([]any)
		addr := net.JoinHostPort(master[0].(string), strconv.FormatInt(master[1].(int64), 10))
		for slot := entry[0].(int64); slot <= entry[1].(int64); slot++ {
			owners[slot] = addr
		}
	}
	return owners
}

// partitionsPerMaster counts each master's partitions from the CRC16 slot
// of each partition's wire key.
func partitionsPerMaster(owners []string, l *shardcast.Layout) map[string]int {
	counts := map[string]int{}
	for p := range l.Partitions() {
		counts[owners[cluster.KeySlot("{"+l.Tag(p)+"}."+l.Prefix()+"probe")]]++
	}
	return counts
}

// inspectJSON runs inspect -json and decodes the report.
func inspectJSON(t *testing.T, ctx context.Context, args ...string) clusterReport {
	t.Helper()
	var r clusterReport
	out := mustRun(t, ctx, append([]string{"inspect", "-json", "-sample", "100ms"}, args...)...)
	require.NoError(t, json.Unmarshal([]byte(out), &r), out)
	return r
}

// TestSixMasters runs the commands that only read and publish against one
// 6-master, 1-replica-each cluster, one subtest after the other.
func TestSixMasters(t *testing.T) {
	c := redistest.StartCluster(t, 6, 1)
	seed := c.Seeds()[0]
	t.Run("InspectPartitions", func(t *testing.T) { testInspectPartitions(t, c, seed) })
	t.Run("InspectTable", func(t *testing.T) { testInspectTable(t, seed) })
	t.Run("InspectLoad", func(t *testing.T) { testInspectLoad(t, c, seed) })
	t.Run("KeyOwner", func(t *testing.T) { testKeyOwner(t, c, seed) })
	t.Run("InspectRecordedLayout", func(t *testing.T) { testInspectRecordedLayout(t, seed) })
	t.Run("SubPub", func(t *testing.T) { roundTrip(t, "-cluster", seed) })
	t.Run("ClusterNodeGivenToShards", func(t *testing.T) {
		r := runCmd(testCtx(t, 20*time.Second), "", nil, "inspect", "-sample", "10ms", "-shards", seed)
		assert.ErrorContains(t, r.runErr, "is a Redis Cluster node")
	})
}

func testInspectPartitions(t *testing.T, c *redistest.Cluster, seed string) {
	ctx := testCtx(t, 30*time.Second)
	owners := slotOwners(t, ctx, c.Nodes()[0])
	for _, tc := range []struct {
		partitions int
		prefix     string
	}{{128, ""}, {1024, "app:"}} {
		l, err := shardcast.NewLayout(tc.partitions, tc.prefix)
		require.NoError(t, err)
		want := partitionsPerMaster(owners, l)
		r := inspectJSON(t, ctx, "-cluster", seed, "-partitions", strconv.Itoa(tc.partitions), "-prefix", tc.prefix)
		require.Len(t, r.Masters, 6)
		got := map[string]int{}
		for _, m := range r.Masters {
			got[m.Addr] = len(m.Partitions)
			assert.Empty(t, m.Error)
			require.Len(t, m.Replicas, 1, m.Addr)
			assert.Equal(t, "online", m.Replicas[0].State)
			assert.Equal(t, "up", m.Replicas[0].Link)
		}
		assert.Equal(t, want, got, "partitions per master, %d partitions", tc.partitions)
		assert.LessOrEqual(t, r.Balance.Busiest-float64(tc.partitions/6), 1.0, "shipped tags are balanced to ±1")
		assert.Equal(t, l.Fingerprint(), r.Fingerprint)
		assert.Empty(t, r.Idle)
		assert.Empty(t, r.Unowned)
	}
	// The naive tags give the skew the design notes quote for 6 masters.
	r := inspectJSON(t, ctx, "-cluster", seed)
	naive := make([]int, len(r.Masters))
	for i, m := range r.Masters {
		naive[i] = m.NaivePartitions
	}
	assert.Equal(t, []int{27, 15, 22, 23, 16, 25}, naive)
	assert.InDelta(t, 27/(128.0/6), r.NaiveBalance.Ratio, 1e-9)
}

func testInspectTable(t *testing.T, seed string) {
	ctx := testCtx(t, 30*time.Second)
	out := mustRun(t, ctx, "inspect", "-sample", "50ms", "-cluster", seed)
	assert.Contains(t, out, "6 masters, 6 replicas")
	assert.Contains(t, out, "MASTER")
	assert.Contains(t, out, "busiest/mean")
	assert.Contains(t, out, "masters without partitions: none")
	assert.Contains(t, out, "online/link up")
	l, _ := shardcast.NewLayout(128, "")
	assert.Contains(t, out, l.Fingerprint())
	assert.Contains(t, out, "0:"+l.Tag(0))
}

// testInspectLoad subscribes and publishes through the cluster engine and
// checks that inspect sees the channels and SPUBLISH calls where the
// layout puts them.
func testInspectLoad(t *testing.T, c *redistest.Cluster, seed string) {
	ctx := testCtx(t, 30*time.Second)
	l, _ := shardcast.NewLayout(128, "")
	owners := slotOwners(t, ctx, c.Nodes()[0])
	channel := "load:1"
	owner := owners[l.Slot(l.Partition(channel))]

	subCtx, stopSub := context.WithCancel(ctx)
	var subErr syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(subCtx, []string{"sub", "-cluster", seed, channel}, stdio{out: &syncBuffer{}, err: &subErr})
	}()
	defer func() {
		stopSub()
		require.NoError(t, <-done)
	}()
	waitFor(t, ctx, "sub to subscribe", func() bool { return strings.Contains(subErr.String(), "subscribed") })

	before := inspectJSON(t, ctx, "-cluster", seed)
	mustRun(t, ctx, "pub", "-cluster", seed, channel, "a", "b", "c")
	after := inspectJSON(t, ctx, "-cluster", seed)
	for i, m := range after.Masters {
		if m.Addr == owner {
			assert.Equal(t, 1, m.ShardChannels, m.Addr)
			assert.Equal(t, int64(3), m.SPublish.Total-before.Masters[i].SPublish.Total, m.Addr)
		} else {
			assert.Zero(t, m.ShardChannels, m.Addr)
			assert.Equal(t, before.Masters[i].SPublish.Total, m.SPublish.Total, m.Addr)
		}
	}
}

func testKeyOwner(t *testing.T, c *redistest.Cluster, seed string) {
	ctx := testCtx(t, 30*time.Second)
	owners := slotOwners(t, ctx, c.Nodes()[0])
	l, _ := shardcast.NewLayout(512, "p.")
	channels := []string{"room:1", "room:2", "room:3", "news"}
	var got []clusterKey
	out := mustRun(t, ctx, append([]string{"key", "-json", "-cluster", seed, "-partitions", "512", "-prefix", "p."}, channels...)...)
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	require.Len(t, got, len(channels))
	for i, ch := range channels {
		assert.Equal(t, l.Key(ch), got[i].Key)
		assert.Equal(t, cluster.KeySlot(l.Key(ch)), got[i].Slot)
		assert.Equal(t, owners[cluster.KeySlot(l.Key(ch))], got[i].Master, ch)
	}
	text := mustRun(t, ctx, "key", "-cluster", seed, "room:1")
	l128, _ := shardcast.NewLayout(128, "")
	assert.Contains(t, text, "MASTER")
	assert.Contains(t, text, l128.Key("room:1")+"  "+owners[cluster.KeySlot(l128.Key("room:1"))])
}

// TestInspectSkew moves a block of slots by hand and checks that inspect
// reports the skew that follows.
func TestInspectSkew(t *testing.T) {
	c := redistest.StartCluster(t, 3, 0)
	ctx := testCtx(t, 60*time.Second)
	masters, err := c.Masters(ctx)
	require.NoError(t, err)
	// Master 0 takes master 1's first 2000 slots: 7461 slots against
	// 3462 and 5461.
	require.NoError(t, c.MoveSlots(ctx, 5461, 7460, masters[0]))

	l, _ := shardcast.NewLayout(128, "")
	want := partitionsPerMaster(slotOwners(t, ctx, masters[2]), l)
	r := inspectJSON(t, ctx, "-cluster", masters[1].Addr())
	got := map[string]int{}
	for _, m := range r.Masters {
		got[m.Addr] = len(m.Partitions)
	}
	assert.Equal(t, want, got)
	assert.Equal(t, want[masters[0].Addr()], int(r.Balance.Busiest))
	assert.Greater(t, r.Balance.Ratio, 1.25, "master 0 has 45%% of the slots")
	assert.Equal(t, []string{"0-7460"}, r.Masters[0].SlotRanges)

	out := mustRun(t, ctx, "inspect", "-sample", "10ms", "-cluster", masters[1].Addr())
	assert.Contains(t, out, "busiest/mean: "+balanceString(r.Balance))

	// A master that dies (no replica takes over here) is reported, and the
	// command fails after printing what it could read.
	require.NoError(t, masters[2].Kill())
	res := runCmd(ctx, "", nil, "inspect", "-sample", "10ms", "-cluster", masters[1].Addr())
	assert.ErrorIs(t, res.runErr, ErrUnreadNodes)
	assert.Contains(t, res.out, "unreadable: "+masters[2].Addr()+": cannot connect")
	assert.Contains(t, res.out, masters[0].Addr()+"  7461")
}

// TestInspectUnownedPartitions: a partition whose slot no master serves
// is reported, and inspect exits with an error saying so (it exited 0).
func TestInspectUnownedPartitions(t *testing.T) {
	c := redistest.StartCluster(t, 3, 0)
	ctx := testCtx(t, 30*time.Second)
	l, err := shardcast.NewLayout(128, "")
	require.NoError(t, err)
	slot := l.Slot(0)
	owner, err := c.MasterOfSlot(ctx, slot)
	require.NoError(t, err)
	_, err = owner.Do(ctx, "CLUSTER", "DELSLOTS", strconv.Itoa(int(slot)))
	require.NoError(t, err)
	r := runCmd(ctx, "", nil, "inspect", "-sample", "10ms", "-cluster", owner.Addr())
	require.ErrorIs(t, r.runErr, ErrUnownedPartitions)
	assert.ErrorContains(t, r.runErr, "1 of 128")
	assert.Contains(t, r.out, "partitions on no master: 0")
}
