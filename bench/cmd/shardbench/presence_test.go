package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPresOpsOfKeepsRunOrderAndRefusesUnknownCalls(t *testing.T) {
	for _, c := range []struct {
		list string
		want []string
		err  bool
	}{
		{"add,presence,stats", []string{"add", "presence", "stats"}, false},
		{"stats, add", []string{"add", "stats"}, false},
		{"presence,presence", []string{"presence"}, false},
		{"add,hello", nil, true},
		{"", nil, true},
		{" , ", nil, true},
	} {
		got, err := presOpsOf(c.list)
		if c.err {
			assert.Error(t, err, "%q", c.list)
			continue
		}
		require.NoError(t, err, "%q", c.list)
		assert.Equal(t, c.want, got, "%q", c.list)
	}
}

// Calls 0 … channels×clients-1 name every (channel, client) pair once,
// which is what the fill relies on; two clients share a user.
func TestPresWorkloadPairsCoverEveryEntry(t *testing.T) {
	w := newPresWorkload("p:", 7, 5)
	assert.Equal(t, 3, w.users)
	seen := map[[2]int]bool{}
	for i := range 7 * 5 {
		ch, k := w.pair(i)
		var c int
		for j, name := range w.channels {
			if name == ch {
				c = j
			}
		}
		seen[[2]int{c, k}] = true
	}
	assert.Len(t, seen, 35)
	for _, id := range w.clients {
		assert.Len(t, id, 36)
	}
	assert.Equal(t, w.infos[0].UserID, w.infos[1].UserID)
	assert.NotEqual(t, w.infos[1].UserID, w.infos[2].UserID)
}

func TestPresMedianSkipsFailedRunsAndSumsCounts(t *testing.T) {
	servers := []string{"a", "b"}
	rs := []presResult{
		{Round: 1, callResult: callResult{Rate: 10, ClientCPUns: 3, Failed: 1, Conns: map[string]int{"a": 2, "b": 2}}},
		{Round: 2, callResult: callResult{Rate: 30, ClientCPUns: 1, Short: 2, Conns: map[string]int{"a": 2, "b": 4}}},
		{Round: 3, callResult: callResult{Error: "boom", Failed: 5}},
		{Round: 4, callResult: callResult{Rate: 20, ClientCPUns: 2, Conns: map[string]int{"a": 2, "b": 3}}},
	}
	m := presMedian(rs, servers)
	assert.Empty(t, m.Error)
	assert.Zero(t, m.Round)
	assert.Equal(t, 20.0, m.Rate)
	assert.Equal(t, 2.0, m.ClientCPUns)
	assert.Equal(t, uint64(6), m.Failed)
	assert.Equal(t, uint64(2), m.Short)
	assert.Equal(t, map[string]int{"a": 2, "b": 3}, m.Conns)

	// Without an error-free run the first run stands, round and all.
	failed := presMedian(rs[2:3], servers)
	assert.Equal(t, "boom", failed.Error)
	assert.Equal(t, 3, failed.Round)
	assert.NotEmpty(t, presMedian(nil, servers).Error)
}

func TestRoundRatiosPairsRoundsWithoutErrors(t *testing.T) {
	run := func(rate float64, err string) presResult {
		return presResult{callResult: callResult{Rate: rate, Error: err}}
	}
	a := []presResult{run(12, ""), run(9, ""), run(30, "")}
	c := []presResult{run(10, ""), run(10, "x"), run(20, "")}
	assert.Equal(t, "1.20–1.50×", roundRatios(a, c))
	assert.Equal(t, "1.20×", roundRatios(a[:1], c[:1]))
	assert.Equal(t, "–", roundRatios(nil, c))
}

func TestPresReportRatiosAdapterToCentrifuge(t *testing.T) {
	saved := cfg
	defer func() { cfg = saved }()
	cfg.presNodes = 3
	topo := callTopo{Name: "cluster-3", Servers: []string{"m1", "m2", "m3"}}
	conns := func(n int) map[string]int { return map[string]int{"m1": n, "m2": n, "m3": n} }
	all := []presResult{
		{Topology: "cluster-3", Op: "add", Manager: centAdapter, callResult: callResult{Rate: 300, ClientCPUns: 1000, Conns: conns(6), CmdConns: conns(3), OtherConns: conns(3)}},
		{Topology: "cluster-3", Op: "add", Manager: centRedis, callResult: callResult{Rate: 200, ClientCPUns: 2000, Conns: conns(3), CmdConns: conns(3)}},
	}
	rep := presReport(all, []callTopo{topo}, []string{"add"}, []string{centAdapter, centRedis})
	assert.Len(t, rep.medians, 2)
	// ops/s, ops/s per round, p50, p99 (none), client CPU/op.
	assert.Regexp(t, `\|\s*cluster-3\s*\|\s*add\s*\|\s*1\.50×\s*\|\s*1\.50×\s*\|\s*–\s*\|\s*–\s*\|\s*0\.50×\s*\|`, rep.ratios)
	// conns, commands, subscribed, idle, per node per master.
	assert.Regexp(t, centAdapter+`\s*\|\s*3\s*\|\s*6 / 6 / 6\s*\|\s*3 / 3 / 3\s*\|\s*0 / 0 / 0\s*\|\s*3 / 3 / 3\s*\|\s*2\.0\s*\|`, rep.conns)
	assert.Regexp(t, centRedis+`\s*\|\s*3\s*\|\s*3 / 3 / 3\s*\|\s*3 / 3 / 3\s*\|\s*0 / 0 / 0\s*\|\s*0 / 0 / 0\s*\|\s*1\.0\s*\|`, rep.conns)
}

// TestPresRunOnRedis runs the scenario's three calls with both managers
// on a standalone Redis and a 3-master cluster of its own, briefly: every
// run makes calls without failures or short answers, stamped with its
// round, and the adapter's manager opens no connection beyond its
// Broker's.
func TestPresRunOnRedis(t *testing.T) {
	ctx, topos := redisTopos(t)

	saved := cfg
	defer func() { cfg = saved }()
	cfg.presNodes, cfg.presWorkers, cfg.presChannels, cfg.presClients, cfg.presMapping = 2, 8, 100, 4, true
	cfg.warmup, cfg.duration, cfg.heap = 100*time.Millisecond, 300*time.Millisecond, 0

	for _, topo := range topos {
		for _, name := range []string{centAdapter, centRedis} {
			for _, op := range presOps {
				r := presRun(ctx, name, op, topo, 2)
				where := topo.Name + " " + name + " " + op
				require.Empty(t, r.Error, where)
				assert.Equal(t, "presence", r.Scenario, where)
				assert.Equal(t, 2, r.Round, where)
				assert.NotZero(t, r.Ops, where)
				assert.Zero(t, r.Failed, "%s: %s", where, r.Note)
				assert.Zero(t, r.Short, where)
				if name == centAdapter && topo.cluster() {
					for _, s := range topo.Servers {
						assert.Equal(t, cfg.presNodes, r.CmdConns[s], "%s: commands on %s", where, s)
					}
				}
			}
		}
	}
}

func TestSpliceSectionReplacesOrAppends(t *testing.T) {
	doc := "# R\n\n## A\n\na\n\n## B\n\nold b\n### B.1\n\nmore\n\n## C\n\nc\n"
	got := spliceSection(doc, "B", "## B\n\nnew b\n\n")
	assert.Equal(t, "# R\n\n## A\n\na\n\n## B\n\nnew b\n\n## C\n\nc\n", got)
	// The last section runs to the end of the report.
	assert.Equal(t, "# R\n\n## A\n\na\n\n## B\n\nold b\n### B.1\n\nmore\n\n## C\n\nnew c\n",
		spliceSection(doc, "C", "## C\n\nnew c\n"))
	// A heading that only starts like the title is another section.
	assert.Equal(t, doc+"\n## A2\n\nx\n", spliceSection(doc, "A2", "## A2\n\nx\n"))
	assert.Equal(t, "## A\n\nz\n", spliceSection("## A\n\ny\n", "A", "## A\n\nz\n"))
}
