package main

import (
	"fmt"
	"sort"
	"strconv"
	"time"
)

// presTables is the presence section's tables (Markdown) and the median
// rows they show.
type presTables struct {
	runs, ratios, conns string
	medians             []presResult
}

// presReport turns a presence run's results into its tables: the medians
// of every topology, call and manager; the ratios of the adapter to
// Centrifuge's manager; the connections each holds per master.
func presReport(all []presResult, topos []presTopo, ops, names []string) presTables {
	var out presTables
	var rows, rrows, crows [][]string
	for _, t := range topos {
		for _, op := range ops {
			meds := map[string]presResult{}
			for _, name := range names {
				rs := presSelect(all, t.Name, op, name)
				m := presMedian(rs, t.Servers)
				meds[name] = m
				out.medians = append(out.medians, m)
				rows = append(rows, presRow(m, t.Servers, len(rs)))
			}
			a, c := meds[centAdapter], meds[centRedis]
			if a.Error == "" && c.Error == "" && a.Rate > 0 && c.Rate > 0 {
				rrows = append(rrows, []string{t.Name, op, ratio(a.Rate, c.Rate), presRoundRatios(presSelect(all, t.Name, op, centAdapter), presSelect(all, t.Name, op, centRedis)),
					ratio(a.P50us, c.P50us), ratio(a.P99us, c.P99us), ratio(a.ClientCPUns, c.ClientCPUns), ratio(a.RedisCPUns, c.RedisCPUns),
					ratio(a.AllocsPerOp, c.AllocsPerOp)})
			}
		}
		for _, name := range names {
			var rs []presResult
			for _, op := range ops {
				rs = append(rs, presSelect(all, t.Name, op, name)...)
			}
			m := presMedian(rs, t.Servers)
			if m.Error != "" || m.Conns == nil {
				continue
			}
			total := 0
			for _, s := range t.Servers {
				total += m.Conns[s]
			}
			crows = append(crows, []string{t.Name, name, strconv.Itoa(cfg.presNodes), perMaster(m.Conns, t.Servers), perMaster(m.CmdConns, t.Servers),
				perMaster(m.PubSubConns, t.Servers), perMaster(m.OtherConns, t.Servers), fmt.Sprintf("%.1f", float64(total)/float64(cfg.presNodes*len(t.Servers)))})
		}
	}
	out.runs = table([]string{"topology", "call", "manager", "ops/s", "p50", "p99", "client CPU/op", "Redis CPU/op", "client allocs/op", "GC",
		"failed", "short", "runs"}, rows)
	if len(rrows) > 0 {
		out.ratios = table([]string{"topology", "call", "ops/s", "ops/s per round", "p50", "p99", "client CPU/op", "Redis CPU/op", "client allocs/op"}, rrows)
	}
	if len(crows) > 0 {
		out.conns = table([]string{"topology", "manager", "nodes", "conns per master", "commands", "subscribed", "idle", "per node per master"}, crows)
	}
	return out
}

// presSelect returns the runs of one topology, call and manager, in
// round order.
func presSelect(all []presResult, topo, op, name string) []presResult {
	var out []presResult
	for _, r := range all {
		if r.Topology == topo && r.Op == op && r.Manager == name {
			out = append(out, r)
		}
	}
	return out
}

// presMedian combines the error-free runs: each numeric column and each
// master's connection counts is the median over them; failed and short
// are summed over every run. Without an error-free run it returns the
// first run (and its error).
func presMedian(rs []presResult, servers []string) presResult {
	var ok []presResult
	var failed, short uint64
	for _, r := range rs {
		failed += r.Failed
		short += r.Short
		if r.Error == "" {
			ok = append(ok, r)
		}
	}
	if len(ok) == 0 {
		if len(rs) > 0 {
			return rs[0]
		}
		return presResult{Error: "no run"}
	}
	med := func(get func(presResult) float64) float64 { return medianOf(ok, get) }
	m := ok[0]
	m.Round, m.Failed, m.Short, m.Ops = 0, failed, short, 0
	for _, r := range ok {
		m.Ops += r.Ops
	}
	m.Rate = med(func(r presResult) float64 { return r.Rate })
	m.P50us = med(func(r presResult) float64 { return r.P50us })
	m.P99us = med(func(r presResult) float64 { return r.P99us })
	m.ClientCPUns = med(func(r presResult) float64 { return r.ClientCPUns })
	m.RedisCPUns = med(func(r presResult) float64 { return r.RedisCPUns })
	m.AllocsPerOp = med(func(r presResult) float64 { return r.AllocsPerOp })
	m.GCShare = med(func(r presResult) float64 { return r.GCShare })
	medInt := func(get func(presResult) int) int {
		v := make([]int, len(ok))
		for i, r := range ok {
			v[i] = get(r)
		}
		sort.Ints(v)
		return v[len(v)/2]
	}
	m.Conns, m.CmdConns, m.PubSubConns, m.OtherConns = map[string]int{}, map[string]int{}, map[string]int{}, map[string]int{}
	for _, s := range servers {
		m.Conns[s] = medInt(func(r presResult) int { return r.Conns[s] })
		m.CmdConns[s] = medInt(func(r presResult) int { return r.CmdConns[s] })
		m.PubSubConns[s] = medInt(func(r presResult) int { return r.PubSubConns[s] })
		m.OtherConns[s] = medInt(func(r presResult) int { return r.OtherConns[s] })
	}
	return m
}

// presRoundRatios is the range of a[i].Rate / c[i].Rate over the rounds
// in which both ran without error: "0.91–1.20×", or one figure.
func presRoundRatios(a, c []presResult) string {
	var rs []float64
	for i := range min(len(a), len(c)) {
		if a[i].Error == "" && c[i].Error == "" && a[i].Rate > 0 && c[i].Rate > 0 {
			rs = append(rs, a[i].Rate/c[i].Rate)
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

// presRow is a row of the medians table.
func presRow(r presResult, servers []string, runs int) []string {
	if r.Error != "" {
		return []string{r.Topology, r.Op, r.Manager, "error: " + r.Error, "", "", "", "", "", "", strconv.FormatUint(r.Failed, 10),
			strconv.FormatUint(r.Short, 10), strconv.Itoa(runs)}
	}
	us := func(v float64) string { return fmtDur(time.Duration(v * 1e3)) }
	return []string{r.Topology, r.Op, r.Manager, fmtRate(r.Rate), us(r.P50us), us(r.P99us), fmtDur(time.Duration(r.ClientCPUns)),
		fmtDur(time.Duration(r.RedisCPUns)), fmt.Sprintf("%.1f", r.AllocsPerOp), fmt.Sprintf("%.1f%%", 100*r.GCShare),
		strconv.FormatUint(r.Failed, 10), strconv.FormatUint(r.Short, 10), strconv.Itoa(runs)}
}
