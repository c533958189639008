package main

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/cluster"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// threeMasters is redis-cli's split of the slots over three masters.
func threeMasters() shardcast.SlotMap {
	return shardcast.SlotMap{Ranges: []shardcast.SlotRange{
		{Start: 0, End: 5460, Master: "10.0.0.1:6379", MasterID: "id1", Replicas: []string{"10.0.0.4:6379"}},
		{Start: 5461, End: 10922, Master: "10.0.0.2:6379", MasterID: "id2"},
		{Start: 10923, End: 16383, Master: "10.0.0.3:6379", MasterID: "id3"},
	}}
}

// countByMaster counts, for tag(p) of each partition, the master whose
// range holds the CRC16 slot of "{tag}.x": the computation inspect must
// agree with, done without Layout.Slot or Assign.
func countByMaster(m shardcast.SlotMap, n int, tag func(p int) string) map[string]int {
	out := map[string]int{}
	for p := range n {
		slot := cluster.KeySlot("{" + tag(p) + "}.x")
		owner := ""
		for _, r := range m.Ranges {
			if r.Start <= slot && slot <= r.End {
				owner = r.Master
			}
		}
		out[owner]++
	}
	return out
}

func TestClusterReportPartitions(t *testing.T) {
	layout, err := shardcast.NewLayout(128, "app:")
	require.NoError(t, err)
	slots := threeMasters()
	r := buildClusterReport(layout, clusterView{Seed: "10.0.0.1:6379", Slots: slots})

	shipped := countByMaster(slots, 128, layout.Tag)
	naive := countByMaster(slots, 128, strconv.Itoa)
	require.Len(t, r.Masters, 3)
	for _, m := range r.Masters {
		assert.Equal(t, shipped[m.Addr], len(m.Partitions), m.Addr)
		assert.Equal(t, naive[m.Addr], m.NaivePartitions, m.Addr)
		for _, p := range m.Partitions {
			assert.Equal(t, layout.Tag(p.Partition), p.Tag)
			assert.Equal(t, layout.Slot(p.Partition), p.Slot)
		}
	}
	assert.Equal(t, []string{"0-5460"}, r.Masters[0].SlotRanges)
	assert.Equal(t, 5461, r.Masters[0].Slots)
	assert.Equal(t, layout.Fingerprint(), r.Fingerprint)
	assert.Equal(t, "app:", r.Prefix)
	assert.Empty(t, r.Unowned)
	assert.Empty(t, r.Idle)
	// The shipped tables put 42 or 43 partitions on each of 3 masters.
	assert.InDelta(t, 43/(128.0/3), r.Balance.Ratio, 1e-9)
	assert.InDelta(t, 128.0/3, r.Balance.Mean, 1e-9)
	assert.Zero(t, r.SPublishBalance.Ratio, "no traffic sampled")
}

func TestNaiveSlot(t *testing.T) {
	assert.Equal(t, cluster.KeySlot("{7}"), naiveSlot(7))
	assert.Equal(t, cluster.KeySlot("{127}.room"), naiveSlot(127))
}

func TestClusterReportSkewAndGaps(t *testing.T) {
	layout, err := shardcast.NewLayout(64, "")
	require.NoError(t, err)
	m := shardcast.SlotMap{Ranges: []shardcast.SlotRange{
		{Start: 0, End: 12000, Master: "a:1", MasterID: "A"},
		{Start: 12001, End: 16000, Master: "b:1", MasterID: "B"},
		// 16001-16383 unowned
	}}
	nodes := []clusterNode{
		{ID: "A", Addr: "a:1", Flags: []string{"master"}, HasSlots: true},
		{ID: "B", Addr: "b:1", Flags: []string{"master"}, HasSlots: true},
		{ID: "E", Addr: "e:1", Flags: []string{"master"}},               // no slots
		{ID: "F", Addr: "f:1", Flags: []string{"master", "fail"}},       // failed: left out
		{ID: "R", Addr: "r:1", Flags: []string{"slave"}, MasterID: "A"}, // replica of a
		{ID: "S", Addr: "s:1", Flags: []string{"slave", "fail"}, MasterID: "B"},
	}
	r := buildClusterReport(layout, clusterView{Slots: m, Nodes: nodes, ReplicaLinks: map[string]string{"r:1": "up"}})

	want := countByMaster(m, 64, layout.Tag)
	require.Len(t, r.Masters, 3)
	assert.Equal(t, []string{"a:1", "b:1", "e:1"}, []string{r.Masters[0].Addr, r.Masters[1].Addr, r.Masters[2].Addr})
	assert.Equal(t, want["a:1"], len(r.Masters[0].Partitions))
	assert.Equal(t, want["b:1"], len(r.Masters[1].Partitions))
	assert.Equal(t, want[""], len(r.Unowned))
	for _, p := range r.Unowned {
		assert.GreaterOrEqual(t, layout.Slot(p), uint16(16001))
	}
	assert.Equal(t, []string{"e:1"}, r.Idle)
	// Balance is over masters with slots: a's share against the mean of two.
	mean := float64(want["a:1"]+want["b:1"]) / 2
	assert.InDelta(t, float64(want["a:1"])/mean, r.Balance.Ratio, 1e-9)
	assert.Greater(t, r.Balance.Ratio, 1.3, "a owns three quarters of the slots")

	assert.Equal(t, []replicaLink{{Addr: "r:1", State: "not connected", Link: "up"}}, r.Masters[0].Replicas)
	assert.Equal(t, []replicaLink{{Addr: "s:1", State: "failed"}}, r.Masters[1].Replicas)
	assert.Empty(t, r.Masters[2].Replicas)
}

func TestClusterReportSample(t *testing.T) {
	layout, err := shardcast.NewLayout(16, "")
	require.NoError(t, err)
	t0 := time.Unix(1000, 0)
	busy := sample{
		Before: nodeStats{At: t0, CPU: 1.0, Calls: map[string]int64{"spublish": 100, "ssubscribe": 7}},
		After: nodeStats{At: t0.Add(2 * time.Second), CPU: 1.5, Clients: 5, ShardChannels: 9, RecentMaxOutput: 2048,
			Calls:    map[string]int64{"spublish": 1100, "ssubscribe": 9},
			Replicas: []replicaLink{{Addr: "10.0.0.4:6379", State: "online", Lag: 1}}},
		Elapsed: time.Hour, // ignored: the server clock wins
		Output:  outputStats{Subscribers: 2, Backlogged: 1, Total: 10, Max: 10},
	}
	quiet := sample{ // no server clock: the local one counts
		Before:  nodeStats{Calls: map[string]int64{}},
		After:   nodeStats{Clients: 1, Calls: map[string]int64{"spublish": 50}},
		Elapsed: 500 * time.Millisecond,
	}
	down := sample{Err: errors.New("10.0.0.3:6379: cannot connect: refused")}
	v := clusterView{Slots: threeMasters(), Masters: map[string]sample{"10.0.0.1:6379": busy, "10.0.0.2:6379": quiet, "10.0.0.3:6379": down}}
	r := buildClusterReport(layout, v)

	m := r.Masters[0]
	assert.Equal(t, callRate{Total: 1100, PerSecond: 500}, m.SPublish)
	assert.Equal(t, callRate{Total: 9, PerSecond: 1}, m.SSubscribe)
	assert.InDelta(t, 25.0, m.CPUPercent, 1e-9)
	assert.Equal(t, 4, m.Clients, "inspect's own connection is not counted")
	assert.Equal(t, 9, m.ShardChannels)
	assert.Equal(t, int64(2048), m.RecentMaxOutput)
	assert.Equal(t, busy.Output, m.Output)
	assert.Equal(t, []replicaLink{{Addr: "10.0.0.4:6379", State: "online", Lag: 1}}, m.Replicas)

	assert.Equal(t, callRate{Total: 50, PerSecond: 100}, r.Masters[1].SPublish)
	assert.Zero(t, r.Masters[1].Clients)
	assert.Equal(t, "10.0.0.3:6379: cannot connect: refused", r.Masters[2].Error)
	assert.NotEmpty(t, r.Masters[2].Partitions, "partitions come from the slot map, not the node")
	assert.InDelta(t, 2.0, r.SampleSeconds, 1e-9)
	// SPUBLISH rates 500, 100, 0: busiest/mean = 500/200.
	assert.InDelta(t, 2.5, r.SPublishBalance.Ratio, 1e-9)
}

func TestShardsReport(t *testing.T) {
	t0 := time.Unix(1000, 0)
	s := func(chans int, pubs int64) sample {
		return sample{
			Before: nodeStats{At: t0, Calls: map[string]int64{"publish": 0}},
			After:  nodeStats{At: t0.Add(time.Second), Channels: chans, Clients: 3, Calls: map[string]int64{"publish": pubs, "subscribe": 2}},
		}
	}
	v := shardsView{
		Addrs:       []string{"a:1", "b:1", "c:1"},
		Fingerprint: "sharded-x",
		Samples:     []sample{s(100, 10), s(300, 30), {Err: errors.New("c:1: cannot connect")}},
	}
	r := buildShardsReport(v)
	require.Len(t, r.Instances, 3)
	assert.Equal(t, instanceReport{Index: 1, Addr: "b:1", Channels: 300, Publish: callRate{Total: 30, PerSecond: 30},
		Subscribe: callRate{Total: 2, PerSecond: 2}, Clients: 2}, r.Instances[1])
	assert.Equal(t, "c:1: cannot connect", r.Instances[2].Error)
	assert.Equal(t, balance{Busiest: 300, Mean: 200, Ratio: 1.5}, r.ChannelBalance)
	assert.Equal(t, balance{Busiest: 30, Mean: 20, Ratio: 1.5}, r.PublishBalance)
	assert.Equal(t, "sharded-x", r.Fingerprint)
}

func TestBalanceOf(t *testing.T) {
	for _, tc := range []struct {
		loads []float64
		want  balance
	}{
		{nil, balance{}},
		{[]float64{0, 0}, balance{}},
		{[]float64{2, 2}, balance{Busiest: 2, Mean: 2, Ratio: 1}},
		{[]float64{27, 15, 22, 23, 16, 25}, balance{Busiest: 27, Mean: 128.0 / 6, Ratio: 27 / (128.0 / 6)}},
	} {
		got := balanceOf(tc.loads)
		assert.InDelta(t, tc.want.Ratio, got.Ratio, 1e-9, tc.loads)
		assert.InDelta(t, tc.want.Mean, got.Mean, 1e-9, tc.loads)
		assert.Equal(t, tc.want.Busiest, got.Busiest, tc.loads)
	}
}

// TestInspectHostnameEndpoints: a cluster that names its nodes by
// hostname (cluster-preferred-endpoint-type hostname) in CLUSTER SLOTS,
// while CLUSTER NODES and INFO give ip:port, is reported with each node
// once: two masters, none idle, and the replica the master's INFO lists
// by IP is the one the slot map names.
func TestInspectHostnameEndpoints(t *testing.T) {
	layout, err := shardcast.NewLayout(128, "")
	require.NoError(t, err)
	v := clusterView{Seed: "redis-a:6379", Masters: map[string]sample{},
		Slots: shardcast.SlotMap{Ranges: []shardcast.SlotRange{
			{Start: 0, End: 8191, Master: "redis-a:6379", MasterID: "ida", Replicas: []string{"redis-c:6379"}},
			{Start: 8192, End: 16383, Master: "redis-b:6379", MasterID: "idb"},
		}},
		Nodes: parseClusterNodes("ida 10.0.0.1:6379@16379,redis-a myself,master - 0 0 1 connected 0-8191\n" +
			"idb 10.0.0.2:6379@16379,redis-b master - 0 0 2 connected 8192-16383\n" +
			"idc 10.0.0.3:6379@16379,redis-c slave ida 0 0 1 connected\n"),
		ReplicaLinks: map[string]string{"redis-c:6379": "up"}}
	v.preferSlotMapEndpoints()
	var a sample
	a.After.Replicas = []replicaLink{{Addr: "10.0.0.3:6379", State: "online"}}
	v.Masters["redis-a:6379"] = a
	r := buildClusterReport(layout, v)
	require.Len(t, r.Masters, 2, "each master once")
	assert.Empty(t, r.Idle)
	require.Len(t, r.Masters[0].Replicas, 1)
	assert.Equal(t, "redis-c:6379", r.Masters[0].Replicas[0].Addr)
	assert.Equal(t, "online", r.Masters[0].Replicas[0].State)

	// A slot map by IP keeps the IPs.
	ip := clusterView{Slots: shardcast.SlotMap{Ranges: []shardcast.SlotRange{{Start: 0, End: 16383, Master: "10.0.0.1:6379", MasterID: "ida"}}},
		Nodes: parseClusterNodes("ida 10.0.0.1:6379@16379,redis-a myself,master - 0 0 1 connected 0-16383\n")}
	ip.preferSlotMapEndpoints()
	assert.Equal(t, "10.0.0.1:6379", ip.Nodes[0].Addr)
}
