package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMapOpsOfKeepsRunOrderAndRefusesUnknownCalls(t *testing.T) {
	for _, c := range []struct {
		list string
		want []string
		err  bool
	}{
		{"publish,state", []string{"publish", "state"}, false},
		{"state, publish", []string{"publish", "state"}, false},
		{"state,state", []string{"state"}, false},
		{"publish,remove", nil, true},
		{"", nil, true},
	} {
		got, err := mapOpsOf(c.list)
		if c.err {
			assert.Error(t, err, "%q", c.list)
			continue
		}
		require.NoError(t, err, "%q", c.list)
		assert.Equal(t, c.want, got, "%q", c.list)
	}
}

// Calls 0 … channels×keys-1 name every (channel, key) pair once, which
// is what the fill relies on.
func TestMapWorkloadPairsCoverEveryKey(t *testing.T) {
	w := newMapWorkload("m:", 7, 5, 10)
	seen := map[[2]string]bool{}
	for i := range 7 * 5 {
		ch, key := w.pair(i)
		seen[[2]string{ch, key}] = true
	}
	assert.Len(t, seen, 35)
	assert.Len(t, w.data, 10)
}

func TestMapReportRatiosAndConnections(t *testing.T) {
	saved := cfg
	defer func() { cfg = saved }()
	cfg.mapNodes = 3
	topo := callTopo{Name: "cluster-3", Servers: []string{"m1", "m2", "m3"}}
	conns := func(n int) map[string]int { return map[string]int{"m1": n, "m2": n, "m3": n} }
	all := []mapResult{
		{Topology: "cluster-3", Op: "publish", Broker: centAdapter, LivePerOp: 3, callResult: callResult{Rate: 300, ClientCPUns: 1000,
			Conns: conns(6), CmdConns: conns(3), PubSubConns: conns(3), OtherConns: conns(0)}},
		{Topology: "cluster-3", Op: "publish", Broker: centRedis, LivePerOp: 3, callResult: callResult{Rate: 200, ClientCPUns: 2000,
			Conns: conns(131), CmdConns: conns(3), PubSubConns: conns(128), OtherConns: conns(0)}},
		{Topology: "cluster-3", Op: "publish", Broker: centRedis, Round: 2, callResult: callResult{Error: "boom", Failed: 4}},
	}
	rep := mapReport(all, []callTopo{topo}, []string{"publish"}, []string{centAdapter, centRedis})
	assert.Len(t, rep.medians, 2)
	assert.Equal(t, uint64(4), rep.medians[1].Failed, "failed counts every run")
	// ops/s, ops/s per round, p50, p99 (none), client CPU/op.
	assert.Regexp(t, `\|\s*cluster-3\s*\|\s*publish\s*\|\s*1\.50×\s*\|\s*1\.50×\s*\|\s*–\s*\|\s*–\s*\|\s*0\.50×\s*\|`, rep.ratios)
	// conns, subscribed, commands, idle, subscribed and all per node per master.
	assert.Regexp(t, centAdapter+`\s*\|\s*3\s*\|\s*6 / 6 / 6\s*\|\s*3 / 3 / 3\s*\|\s*3 / 3 / 3\s*\|\s*0 / 0 / 0\s*\|\s*1\.0\s*\|\s*2\.0\s*\|`, rep.conns)
	assert.Regexp(t, centRedis+`\s*\|\s*3\s*\|\s*131 / 131 / 131\s*\|\s*128 / 128 / 128\s*\|\s*3 / 3 / 3\s*\|\s*0 / 0 / 0\s*\|\s*42\.7\s*\|\s*43\.7\s*\|`, rep.conns)
	assert.Regexp(t, `\|\s*publish\s*\|\s*`+centAdapter+`\s*\|.*\|\s*3\.00\s*\|\s*0\s*\|\s*0\s*\|\s*0\s*\|\s*1\s*\|`, rep.runs)
}

// TestMapRunOnRedis runs the scenario's two calls with both brokers on a
// standalone Redis and a 3-master cluster of its own, briefly: every run
// makes calls without failures, every publish reaches every node (the run
// waits for the deliveries with a deadline), and
// the connection counts are the brokers' (one subscribe and one
// publishing connection per node and master for the adapter on the
// cluster; a connection per partition and node for Centrifuge's).
func TestMapRunOnRedis(t *testing.T) {
	ctx, topos := redisTopos(t)

	saved := cfg
	defer func() { cfg = saved }()
	cfg.mapNodes, cfg.mapWorkers, cfg.mapChannels, cfg.mapKeys, cfg.mapPayload = 3, 8, 300, 4, 64
	cfg.warmup, cfg.duration, cfg.heap = 100*time.Millisecond, 300*time.Millisecond, 0

	for _, topo := range topos {
		for _, name := range []string{centAdapter, centRedis} {
			for _, op := range mapOps {
				r := mapRun(ctx, name, op, topo, 1)
				where := topo.Name + " " + name + " " + op
				require.Empty(t, r.Error, where)
				assert.NotZero(t, r.Ops, where)
				assert.Zero(t, r.Failed, "%s: %s", where, r.Note)
				assert.Zero(t, r.Short, where)
				// Every publish, the fill's included, reached every node.
				assert.Zero(t, r.LiveMissed, where)
				if op == "publish" {
					assert.NotZero(t, r.LivePerOp, where)
				}
				subscribed, all := 0, 0
				for _, s := range topo.Servers {
					subscribed += r.PubSubConns[s]
					all += r.Conns[s]
				}
				switch {
				case name == centAdapter && topo.cluster():
					for _, s := range topo.Servers {
						assert.Equal(t, cfg.mapNodes, r.PubSubConns[s], "%s: subscribed on %s", where, s)
						assert.Equal(t, cfg.mapNodes, r.CmdConns[s], "%s: commands on %s", where, s)
						assert.Zero(t, r.OtherConns[s], "%s: idle on %s", where, s)
					}
				case name == centAdapter:
					assert.Equal(t, cfg.mapNodes, subscribed, where)
					// The publishing connection, and the layout record's
					// heartbeat on the control instance (the same here).
					assert.Equal(t, 2*cfg.mapNodes, r.CmdConns[topo.Servers[0]], where)
				case topo.cluster():
					// One connection per partition and node, all but a
					// few subscribed (300 channels leave few partitions
					// empty), beside the rueidis pipelines.
					assert.GreaterOrEqual(t, all, cfg.mapNodes*centPartitions, where)
					assert.Greater(t, subscribed, cfg.mapNodes*centPartitions*3/4, where)
				default:
					assert.Equal(t, cfg.mapNodes, subscribed, where)
				}
			}
		}
	}
}
