package main

import (
	"fmt"
	"sort"
	"strconv"
	"time"
)

// mapTables is the map section's tables (Markdown) and the median rows
// they show.
type mapTables struct {
	runs, ratios, conns string
	medians             []mapResult
}

// mapReport turns a map run's results into its tables: the medians of
// every topology, call and broker; the ratios of the adapter to
// Centrifuge's broker; the connections each holds per master.
func mapReport(all []mapResult, topos []presTopo, ops, names []string) mapTables {
	var out mapTables
	var rows, rrows, crows [][]string
	for _, t := range topos {
		for _, op := range ops {
			meds := map[string]mapResult{}
			for _, name := range names {
				rs := mapSelect(all, t.Name, op, name)
				m := mapMedian(rs, t.Servers)
				meds[name] = m
				out.medians = append(out.medians, m)
				rows = append(rows, mapRow(m, len(rs)))
			}
			a, c := meds[centAdapter], meds[centRedis]
			if a.Error == "" && c.Error == "" && a.Rate > 0 && c.Rate > 0 {
				rrows = append(rrows, []string{t.Name, op, ratio(a.Rate, c.Rate), mapRoundRatios(mapSelect(all, t.Name, op, centAdapter), mapSelect(all, t.Name, op, centRedis)),
					ratio(a.P50us, c.P50us), ratio(a.P99us, c.P99us), ratio(a.ClientCPUns, c.ClientCPUns), ratio(a.RedisCPUns, c.RedisCPUns),
					ratio(a.AllocsPerOp, c.AllocsPerOp)})
			}
		}
		for _, name := range names {
			var rs []mapResult
			for _, op := range ops {
				rs = append(rs, mapSelect(all, t.Name, op, name)...)
			}
			m := mapMedian(rs, t.Servers)
			if m.Error != "" || m.Conns == nil {
				continue
			}
			total, subscribed := 0, 0
			for _, s := range t.Servers {
				total += m.Conns[s]
				subscribed += m.PubSubConns[s]
			}
			per := float64(cfg.mapNodes * len(t.Servers))
			crows = append(crows, []string{t.Name, name, strconv.Itoa(cfg.mapNodes), perMaster(m.Conns, t.Servers), perMaster(m.PubSubConns, t.Servers),
				perMaster(m.CmdConns, t.Servers), perMaster(m.OtherConns, t.Servers), fmt.Sprintf("%.1f", float64(subscribed)/per), fmt.Sprintf("%.1f", float64(total)/per)})
		}
	}
	out.runs = table([]string{"topology", "call", "broker", "ops/s", "p50", "p99", "client CPU/op", "Redis CPU/op", "client allocs/op", "GC",
		"live/op", "live missed", "failed", "short", "runs"}, rows)
	if len(rrows) > 0 {
		out.ratios = table([]string{"topology", "call", "ops/s", "ops/s per round", "p50", "p99", "client CPU/op", "Redis CPU/op", "client allocs/op"}, rrows)
	}
	if len(crows) > 0 {
		out.conns = table([]string{"topology", "broker", "nodes", "conns per master", "subscribed", "commands", "idle", "subscribed per node per master",
			"all per node per master"}, crows)
	}
	return out
}

// mapSelect returns the runs of one topology, call and broker, in round
// order.
func mapSelect(all []mapResult, topo, op, name string) []mapResult {
	var out []mapResult
	for _, r := range all {
		if r.Topology == topo && r.Op == op && r.Broker == name {
			out = append(out, r)
		}
	}
	return out
}

// mapMedian combines the error-free runs: each numeric column and each
// master's connection counts is the median over them; failed and short
// are summed over every run, live missed over the error-free ones. Without an error-free run it returns the
// first run (and its error).
func mapMedian(rs []mapResult, servers []string) mapResult {
	var ok []mapResult
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
		return mapResult{Error: "no run"}
	}
	med := func(get func(mapResult) float64) float64 { return medianOf(ok, get) }
	m := ok[0]
	m.Round, m.Failed, m.Short, m.Ops, m.LiveMissed = 0, failed, short, 0, 0
	for _, r := range ok {
		m.Ops += r.Ops
		m.LiveMissed += r.LiveMissed
	}
	m.Rate = med(func(r mapResult) float64 { return r.Rate })
	m.P50us = med(func(r mapResult) float64 { return r.P50us })
	m.P99us = med(func(r mapResult) float64 { return r.P99us })
	m.ClientCPUns = med(func(r mapResult) float64 { return r.ClientCPUns })
	m.RedisCPUns = med(func(r mapResult) float64 { return r.RedisCPUns })
	m.AllocsPerOp = med(func(r mapResult) float64 { return r.AllocsPerOp })
	m.GCShare = med(func(r mapResult) float64 { return r.GCShare })
	m.LivePerOp = med(func(r mapResult) float64 { return r.LivePerOp })
	medInt := func(get func(mapResult) int) int {
		v := make([]int, len(ok))
		for i, r := range ok {
			v[i] = get(r)
		}
		sort.Ints(v)
		return v[len(v)/2]
	}
	m.Conns, m.CmdConns, m.PubSubConns, m.OtherConns = map[string]int{}, map[string]int{}, map[string]int{}, map[string]int{}
	for _, s := range servers {
		m.Conns[s] = medInt(func(r mapResult) int { return r.Conns[s] })
		m.CmdConns[s] = medInt(func(r mapResult) int { return r.CmdConns[s] })
		m.PubSubConns[s] = medInt(func(r mapResult) int { return r.PubSubConns[s] })
		m.OtherConns[s] = medInt(func(r mapResult) int { return r.OtherConns[s] })
	}
	return m
}

// mapRoundRatios is the range of a[i].Rate / c[i].Rate over the rounds in
// which both ran without error, as presRoundRatios renders it.
func mapRoundRatios(a, c []mapResult) string {
	pa, pc := make([]presResult, len(a)), make([]presResult, len(c))
	for i, r := range a {
		pa[i] = presResult{Rate: r.Rate, Error: r.Error}
	}
	for i, r := range c {
		pc[i] = presResult{Rate: r.Rate, Error: r.Error}
	}
	return presRoundRatios(pa, pc)
}

// mapRow is a row of the medians table.
func mapRow(r mapResult, runs int) []string {
	if r.Error != "" {
		return []string{r.Topology, r.Op, r.Broker, "error: " + r.Error, "", "", "", "", "", "", "", "", strconv.FormatUint(r.Failed, 10),
			strconv.FormatUint(r.Short, 10), strconv.Itoa(runs)}
	}
	us := func(v float64) string { return fmtDur(time.Duration(v * 1e3)) }
	live := "–"
	if r.Op == "publish" {
		live = fmt.Sprintf("%.2f", r.LivePerOp)
	}
	return []string{r.Topology, r.Op, r.Broker, fmtRate(r.Rate), us(r.P50us), us(r.P99us), fmtDur(time.Duration(r.ClientCPUns)),
		fmtDur(time.Duration(r.RedisCPUns)), fmt.Sprintf("%.1f", r.AllocsPerOp), fmt.Sprintf("%.1f%%", 100*r.GCShare), live,
		strconv.FormatUint(r.LiveMissed, 10), strconv.FormatUint(r.Failed, 10), strconv.FormatUint(r.Short, 10), strconv.Itoa(runs)}
}
