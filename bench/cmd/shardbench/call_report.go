package main

import (
	"fmt"
	"sort"
	"strconv"
	"time"
)

// The presence and map scenarios measure the same thing of different
// calls: closed-loop calls through contrib/centrifugebroker and through
// Centrifuge's Redis engine, per topology and call, round by round. What
// they measure of the calls is callResult, and one report turns runs of
// either into the medians, ratio and connection tables; each scenario
// adds only the columns of its own.

// callResult is what a presence or map run measures of its calls,
// embedded in presResult and mapResult (encoding/json writes its fields
// as theirs).
type callResult struct {
	// Ops counts the calls started inside the measured window that
	// returned without error; Rate is Ops per second.
	Ops         uint64  `json:"ops"`
	Rate        float64 `json:"ops_per_sec"`
	P50us       float64 `json:"p50_us"`
	P99us       float64 `json:"p99_us"`
	ClientCPUns float64 `json:"client_cpu_ns_per_op"`
	RedisCPUns  float64 `json:"redis_cpu_ns_per_op"`
	AllocsPerOp float64 `json:"client_allocs_per_op"`
	GCShare     float64 `json:"gc_cpu_share"`
	// Conns is every connection the nodes hold per master, counted with
	// CLIENT LIST at the end of the window minus those there before the
	// nodes, and split by kind (see connKinds): CmdConns last ran a
	// script (or published, or polled the slot map), PubSubConns hold a
	// subscription, OtherConns are the rest, idle since their handshake
	// or a PING.
	Conns       map[string]int `json:"connections_per_master"`
	CmdConns    map[string]int `json:"command_connections_per_master"`
	PubSubConns map[string]int `json:"pubsub_connections_per_master"`
	OtherConns  map[string]int `json:"other_connections_per_master"`
	// Failed counts calls that returned an error, Short answers the
	// scenario counts as short (see its workload's call), over the whole
	// run.
	Failed uint64 `json:"failed"`
	Short  uint64 `json:"short"`
	Note   string `json:"note,omitempty"`
	Error  string `json:"error,omitempty"`
}

// calls returns r itself; presResult and mapResult inherit it, which is
// how the shared report reaches their measurements.
func (r *callResult) calls() *callResult { return r }

// callKey is the row a run belongs to: its topology, call and engine
// (presence manager or map broker).
type callKey struct{ topo, op, engine string }

// callRun is a scenario's result type as the shared report sees it:
// R's pointer reaches the embedded callResult and tells the run's row.
type callRun[R any] interface {
	*R
	calls() *callResult
	key() callKey
}

// callColumns is what a scenario's tables hold of its own.
type callColumns[R any] struct {
	// engine heads the engine column: "manager", "broker".
	engine string
	// median combines one row's runs (see medianRun).
	median func(rs []R, servers []string) R
	// own heads the medians table's columns after GC, if any, and
	// ownCells fills them, one cell a column.
	own      []string
	ownCells func(m R) []string
	// conns heads the connection table's columns after topology and
	// engine, and connRow fills them for one engine's median over every
	// call on t.
	conns   []string
	connRow func(t callTopo, m *callResult) []string
}

// callTables is a scenario's tables (Markdown) and the median rows they
// show.
type callTables[R any] struct {
	runs, ratios, conns string
	medians             []R
}

// callReport turns a scenario's runs into its tables: the medians of
// every topology, call and engine; the ratios of the adapter to
// Centrifuge's engine; the connections each holds per master.
func callReport[R any, P callRun[R]](all []R, topos []callTopo, ops, names []string, cols callColumns[R]) callTables[R] {
	var out callTables[R]
	var rows, rrows, crows [][]string
	for _, t := range topos {
		for _, op := range ops {
			meds := map[string]*callResult{}
			for _, name := range names {
				rs := selectRuns[R, P](all, callKey{t.Name, op, name})
				m := cols.median(rs, t.Servers)
				meds[name] = P(&m).calls()
				out.medians = append(out.medians, m)
				var own []string
				if cols.ownCells != nil {
					own = cols.ownCells(m)
				}
				rows = append(rows, callRow(P(&m).key(), meds[name], own, len(rs)))
			}
			a, c := meds[centAdapter], meds[centRedis]
			if a.Error == "" && c.Error == "" && a.Rate > 0 && c.Rate > 0 {
				perRound := roundRatios[R, P](selectRuns[R, P](all, callKey{t.Name, op, centAdapter}), selectRuns[R, P](all, callKey{t.Name, op, centRedis}))
				rrows = append(rrows, []string{t.Name, op, ratio(a.Rate, c.Rate), perRound, ratio(a.P50us, c.P50us), ratio(a.P99us, c.P99us),
					ratio(a.ClientCPUns, c.ClientCPUns), ratio(a.RedisCPUns, c.RedisCPUns), ratio(a.AllocsPerOp, c.AllocsPerOp)})
			}
		}
		for _, name := range names {
			var rs []R
			for _, op := range ops {
				rs = append(rs, selectRuns[R, P](all, callKey{t.Name, op, name})...)
			}
			m := cols.median(rs, t.Servers)
			if c := P(&m).calls(); c.Error == "" && c.Conns != nil {
				crows = append(crows, append([]string{t.Name, name}, cols.connRow(t, c)...))
			}
		}
	}
	head := append([]string{"topology", "call", cols.engine, "ops/s", "p50", "p99", "client CPU/op", "Redis CPU/op", "client allocs/op", "GC"}, cols.own...)
	out.runs = table(append(head, "failed", "short", "runs"), rows)
	if len(rrows) > 0 {
		out.ratios = table([]string{"topology", "call", "ops/s", "ops/s per round", "p50", "p99", "client CPU/op", "Redis CPU/op", "client allocs/op"}, rrows)
	}
	if len(crows) > 0 {
		out.conns = table(append([]string{"topology", cols.engine}, cols.conns...), crows)
	}
	return out
}

// selectRuns returns the runs of one row, in round order.
func selectRuns[R any, P callRun[R]](all []R, k callKey) []R {
	var out []R
	for i := range all {
		if P(&all[i]).key() == k {
			out = append(out, all[i])
		}
	}
	return out
}

// medianRun combines one row's error-free runs: the first of them, its
// measurements replaced by each numeric column's and each master's
// connection counts' median over them, Ops summed over them, failed and
// short over every run. It also returns those runs, for the columns a
// scenario combines itself. Without an error-free run it returns the
// first run (and its error).
func medianRun[R any, P callRun[R]](rs []R, servers []string) (m R, ok []R) {
	var failed, short uint64
	for i := range rs {
		c := P(&rs[i]).calls()
		failed += c.Failed
		short += c.Short
		if c.Error == "" {
			ok = append(ok, rs[i])
		}
	}
	if len(ok) == 0 {
		if len(rs) > 0 {
			return rs[0], nil
		}
		P(&m).calls().Error = "no run"
		return m, nil
	}
	runs := make([]*callResult, len(ok))
	for i := range ok {
		runs[i] = P(&ok[i]).calls()
	}
	med := func(get func(*callResult) float64) float64 { return medianOf(runs, get) }
	m = ok[0]
	c := P(&m).calls()
	c.Failed, c.Short, c.Ops = failed, short, 0
	for _, r := range runs {
		c.Ops += r.Ops
	}
	c.Rate = med(func(r *callResult) float64 { return r.Rate })
	c.P50us = med(func(r *callResult) float64 { return r.P50us })
	c.P99us = med(func(r *callResult) float64 { return r.P99us })
	c.ClientCPUns = med(func(r *callResult) float64 { return r.ClientCPUns })
	c.RedisCPUns = med(func(r *callResult) float64 { return r.RedisCPUns })
	c.AllocsPerOp = med(func(r *callResult) float64 { return r.AllocsPerOp })
	c.GCShare = med(func(r *callResult) float64 { return r.GCShare })
	medInt := func(get func(*callResult) int) int {
		v := make([]int, len(runs))
		for i, r := range runs {
			v[i] = get(r)
		}
		sort.Ints(v)
		return v[len(v)/2]
	}
	c.Conns, c.CmdConns, c.PubSubConns, c.OtherConns = map[string]int{}, map[string]int{}, map[string]int{}, map[string]int{}
	for _, s := range servers {
		c.Conns[s] = medInt(func(r *callResult) int { return r.Conns[s] })
		c.CmdConns[s] = medInt(func(r *callResult) int { return r.CmdConns[s] })
		c.PubSubConns[s] = medInt(func(r *callResult) int { return r.PubSubConns[s] })
		c.OtherConns[s] = medInt(func(r *callResult) int { return r.OtherConns[s] })
	}
	return m, ok
}

// roundRatios is the range of a[i].Rate / c[i].Rate over the rounds in
// which both ran without error: "0.91–1.20×", or one figure.
func roundRatios[R any, P callRun[R]](a, c []R) string {
	var rs []float64
	for i := range min(len(a), len(c)) {
		x, y := P(&a[i]).calls(), P(&c[i]).calls()
		if x.Error == "" && y.Error == "" && x.Rate > 0 && y.Rate > 0 {
			rs = append(rs, x.Rate/y.Rate)
		}
	}
	if len(rs) == 0 {
		return "–"
	}
	lo, hi := rs[0], rs[0]
	for _, r := range rs {
		lo, hi = min(lo, r), max(hi, r)
	}
	if fmt.Sprintf("%.2f", lo) == fmt.Sprintf("%.2f", hi) {
		return fmt.Sprintf("%.2f×", lo)
	}
	return fmt.Sprintf("%.2f–%.2f×", lo, hi)
}

// callRow is a row of the medians table: the row's key, the measured
// columns and the scenario's own (blank when the median has an error),
// the counts of failed and short calls and of runs.
func callRow(k callKey, r *callResult, own []string, runs int) []string {
	counts := []string{strconv.FormatUint(r.Failed, 10), strconv.FormatUint(r.Short, 10), strconv.Itoa(runs)}
	if r.Error != "" {
		row := append([]string{k.topo, k.op, k.engine, "error: " + r.Error}, make([]string, 6+len(own))...)
		return append(row, counts...)
	}
	us := func(v float64) string { return fmtDur(time.Duration(v * 1e3)) }
	row := []string{k.topo, k.op, k.engine, fmtRate(r.Rate), us(r.P50us), us(r.P99us), fmtDur(time.Duration(r.ClientCPUns)),
		fmtDur(time.Duration(r.RedisCPUns)), fmt.Sprintf("%.1f", r.AllocsPerOp), fmt.Sprintf("%.1f%%", 100*r.GCShare)}
	return append(append(row, own...), counts...)
}

// perNodeMaster renders the sum of m over servers per node and master.
func perNodeMaster(m map[string]int, servers []string, nodes int) string {
	total := 0
	for _, s := range servers {
		total += m[s]
	}
	return fmt.Sprintf("%.1f", float64(total)/float64(nodes*len(servers)))
}
