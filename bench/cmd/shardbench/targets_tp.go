package main

import (
	"fmt"
	"strings"
	"time"
)

// throughputTargets renders the ratios between engines and checks the
// throughput targets of issues 5 and 15 against the medians m of the
// production-like rows; ref, the reference rows' medians (nil: none), adds
// the same ratios between reference rows beside them.
func throughputTargets(m, ref map[string]map[int]map[string]tpResult) (string, []target) {
	var b strings.Builder
	var ts []target
	var rows [][]string
	add := func(topo string, p int, a, c string) (tpResult, tpResult, bool) {
		ra, okA := m[topo][p][a]
		rc, okC := m[topo][p][c]
		if !okA || !okC || ra.Rate == 0 || rc.Rate == 0 {
			return ra, rc, false
		}
		cpu := "–"
		if rc.ClientCPUns > 0 && ra.ClientCPUns > 0 {
			cpu = ratio(ra.ClientCPUns, rc.ClientCPUns)
		}
		p99 := "–"
		if rc.P99us > 0 && ra.P99us > 0 {
			p99 = ratio(ra.P99us, rc.P99us)
		}
		row := []string{topo, fmt.Sprint(p), a + " / " + c, ratio(ra.Rate, rc.Rate), cpu, p99}
		if ref != nil {
			// The ceiling has no reference run: its process is its own.
			fa, fc := ref[topo][p][a], ref[topo][p][c]
			if c == ceiling {
				fc = rc
			}
			rate, rcpu := "–", "–"
			if fa.Rate > 0 && fc.Rate > 0 {
				rate = ratio(fa.Rate, fc.Rate)
			}
			if fa.ClientCPUns > 0 && fc.ClientCPUns > 0 {
				rcpu = ratio(fa.ClientCPUns, fc.ClientCPUns)
			}
			row = append(row, rate, rcpu)
		}
		rows = append(rows, row)
		return ra, rc, true
	}
	for _, topo := range []string{"standalone", "cluster-3", allCores} {
		for _, p := range sortedKeys(m[topo]) {
			if topo != "cluster-3" {
				add(topo, p, "shardcast", "centrifuge")
				add(topo, p, "shardcast", "go-redis")
				add(topo, p, "shardcast", ceiling)
			} else {
				add(topo, p, "shardcast-cluster", "centrifuge-sharded")
				add(topo, p, "shardcast-cluster", "centrifuge-sharded-tags")
				add(topo, p, "shardcast-cluster", "go-redis-cluster")
			}
		}
	}

	if a, c, ok := add("standalone", 128, "shardcast", "centrifuge"); ok {
		r := a.Rate / c.Rate
		ts = append(ts, target{"standalone, 128 publishers: delivered/s ≥ 1.3× Centrifuge", fmt.Sprintf("%.2f× (%s vs %s)", r, fmtRate(a.Rate), fmtRate(c.Rate)), metStr(r >= 1.3)})
		cr := a.ClientCPUns / c.ClientCPUns
		ts = append(ts, target{"standalone, 128 publishers: client CPU/msg ≤ 0.75× Centrifuge", fmt.Sprintf("%.2f× (%s vs %s)", cr, fmtDur(time.Duration(a.ClientCPUns)), fmtDur(time.Duration(c.ClientCPUns))), metStr(cr <= 0.75)})
	}
	if a, c, ok := add("standalone", 8, "shardcast", "centrifuge"); ok {
		r := a.Rate / c.Rate
		ts = append(ts, target{"standalone, 8 publishers: delivered/s ≥ 3× Centrifuge with a lower p99",
			fmt.Sprintf("%.2f× (%s vs %s); p99 %s vs %s", r, fmtRate(a.Rate), fmtRate(c.Rate), fmtDur(time.Duration(a.P99us*1e3)), fmtDur(time.Duration(c.P99us*1e3))),
			metStr(r >= 3 && a.P99us < c.P99us)})
	}
	for _, peer := range []string{"centrifuge-sharded", "centrifuge-sharded-tags"} {
		if a, c, ok := add("cluster-3", 128, "shardcast-cluster", peer); ok {
			r := a.Rate / c.Rate
			ts = append(ts, target{"3-master cluster, 128 publishers: delivered/s ≥ 1.3× Centrifuge (" + peer + ")", fmt.Sprintf("%.2f× (%s vs %s)", r, fmtRate(a.Rate), fmtRate(c.Rate)), metStr(r >= 1.3)})
		}
	}
	for _, p := range sortedKeys(m["standalone"]) {
		a, c := m["standalone"][p]["shardcast"], m["standalone"][p][ceiling]
		if a.Rate > 0 && c.Rate > 0 {
			ts = append(ts, target{fmt.Sprintf("report shardcast delivered/s as a fraction of the redis-benchmark ceiling (%d publishers)", p),
				fmt.Sprintf("%.0f%% (%s of %s)", 100*a.Rate/c.Rate, fmtRate(a.Rate), fmtRate(c.Rate)), "reported"})
		}
	}
	ts = append(ts, speedTargets(m, add)...)
	// The target rows were added to the ratio table too; rebuild it without duplicates.
	seen := map[string]bool{}
	var uniq [][]string
	for _, r := range rows {
		k := strings.Join(r, "|")
		if !seen[k] {
			seen[k] = true
			uniq = append(uniq, r)
		}
	}
	head := []string{"topology", "publishers", "engines", "delivered/s ratio", "client CPU/msg ratio", "p99 ratio"}
	b.WriteString("### Ratios (medians of the same run)\n\n")
	if ref != nil {
		head = append(head, "reference: delivered/s ratio", "reference: client CPU/msg ratio")
		b.WriteString("Between production-like rows; the last two columns give the same ratios between the reference rows of the same rounds.\n\n")
	}
	b.WriteString(table(head, uniq))
	b.WriteString("\n")
	return b.String(), ts
}

func sortedKeys[V any](m map[int]V) []int {
	var out []int
	for k := range m {
		out = append(out, k)
	}
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

// ceilingFraction returns an engine's fraction of the ceiling, the
// paired per-round ratio where the run has one (see tpResult.CeilingRatio),
// and its rendering beside the ratio of the medians.
func ceilingFraction(a, c tpResult) (float64, string) {
	f := a.Rate / c.Rate
	if a.CeilingPairs == 0 {
		return f, fmt.Sprintf("%.2f× (%s of %s; no round with both runs whole)", f, fmtRate(a.Rate), fmtRate(c.Rate))
	}
	return a.CeilingRatio, fmt.Sprintf("%.2f× (median of %d same-round ratios; medians %s of %s, %.2f×)", a.CeilingRatio, a.CeilingPairs, fmtRate(a.Rate), fmtRate(c.Rate), f)
}

// speedTargets checks the targets of issue 15 (make Redis, not the Go
// client, the bottleneck) against the medians; add is throughputTargets'
// ratio-row helper.
func speedTargets(m map[string]map[int]map[string]tpResult, add func(topo string, p int, a, c string) (tpResult, tpResult, bool)) []target {
	var ts []target
	for _, c := range []struct {
		p    int
		want float64
	}{{128, 0.8}, {8, 0.5}} {
		if a, r, ok := add("standalone", c.p, "shardcast", ceiling); ok {
			f, got := ceilingFraction(a, r)
			ts = append(ts, target{fmt.Sprintf("speed (issue 15), GOMAXPROCS %d, %d publishers: delivered/s ≥ %.1f× the redis-benchmark ceiling", clientProcs, c.p, c.want),
				got, metStr(f >= c.want)})
		}
	}
	// The same targets for the opt-in form: PublishAsync with up to 16
	// calls in flight per publisher goroutine (the headline stays Publish).
	for _, c := range []struct {
		p    int
		want float64
	}{{128, 0.8}, {8, 0.5}} {
		if a, r, ok := add("standalone", c.p, "shardcast-async", ceiling); ok {
			f, got := ceilingFraction(a, r)
			ts = append(ts, target{fmt.Sprintf("speed (issue 15), opt-in PublishAsync (16 in flight per publisher), GOMAXPROCS %d, %d publishers: delivered/s ≥ %.1f× the redis-benchmark ceiling", clientProcs, c.p, c.want),
				got + ", client CPU/msg " + fmtDur(time.Duration(a.ClientCPUns)), metStr(f >= c.want)})
		}
	}
	if a, c, ok := add(allCores, 128, "shardcast", "centrifuge"); ok {
		r, cr := a.Rate/c.Rate, a.ClientCPUns/c.ClientCPUns
		ts = append(ts, target{"speed (issue 15), every core, 128 publishers: ≥ 1.6× Centrifuge delivered/s, client CPU/msg ≤ 0.5×, p99 no worse",
			fmt.Sprintf("%.2f× (%s vs %s), CPU/msg %.2f× (%s vs %s), p99 %s vs %s", r, fmtRate(a.Rate), fmtRate(c.Rate),
				cr, fmtDur(time.Duration(a.ClientCPUns)), fmtDur(time.Duration(c.ClientCPUns)),
				fmtDur(time.Duration(a.P99us*1e3)), fmtDur(time.Duration(c.P99us*1e3))),
			metStr(r >= 1.6 && cr <= 0.5 && a.P99us <= c.P99us)})
	}
	if a, c, ok := add("cluster-3", 128, "shardcast-cluster", "centrifuge-sharded"); ok {
		r := a.Rate / c.Rate
		ts = append(ts, target{"speed (issue 15), 3-master cluster, 128 publishers: ≥ 2.5× Centrifuge (centrifuge-sharded)",
			fmt.Sprintf("%.2f× (%s vs %s)", r, fmtRate(a.Rate), fmtRate(c.Rate)), metStr(r >= 2.5)})
	}
	if a, ok := m["standalone"][128]["shardcast"]; ok && a.ClientCPUns > 0 {
		ts = append(ts, target{"speed (issue 15), client CPU per delivered message at 128 publishers ≤ 1.2µs",
			fmtDur(time.Duration(a.ClientCPUns)), metStr(a.ClientCPUns <= 1200)})
	}
	if a, c, ok := add("standalone", 128, "shardcast", "centrifuge"); ok && a.ClientCPUns > 0 {
		bounds := syncBounds(m["standalone"][128])
		ts = append(ts,
			target{"speed (issue 44), standalone, 128 publishers: synchronous Publish client CPU per delivered message ≤ 1.5µs (Redis's own CPU/msg beside it)",
				fmt.Sprintf("%s (Redis %s)%s", fmtDur(time.Duration(a.ClientCPUns)), fmtDur(time.Duration(a.RedisCPUns)), bounds.cpu), metStr(a.ClientCPUns <= 1500)},
			target{"speed (issue 44), standalone, 128 publishers: synchronous Publish delivered/s ≥ 1.5× Centrifuge",
				fmt.Sprintf("%.2f× (%s vs %s)%s", a.Rate/c.Rate, fmtRate(a.Rate), fmtRate(c.Rate), bounds.rate(1.5*c.Rate)), metStr(a.Rate >= 1.5*c.Rate)})
	}
	if a, ok := m["standalone"][128]["shardcast-async"]; ok && a.ClientCPUns > 0 {
		ts = append(ts, target{"speed (issue 15), opt-in PublishAsync, client CPU per delivered message at 128 publishers ≤ 1.2µs",
			fmtDur(time.Duration(a.ClientCPUns)), metStr(a.ClientCPUns <= 1200)})
	}
	return ts
}

// syncRefs are the same rounds' figures the synchronous Publish's issue
// 44 targets are read against.
type syncRefs struct {
	cpu         string  // the client CPU/msg part, "" when the run has neither row
	ceilingRate float64 // the ceiling's delivered/s, 0 when the run has none
}

// syncBounds picks them from the 128-publisher standalone medians: what
// the opt-in PublishAsync (no caller parked per message) and the
// redis-benchmark ceiling (a C client pipelining 16 deep, its subscriber
// only counting bytes) cost per delivered message, and the ceiling's rate.
func syncBounds(row map[string]tpResult) syncRefs {
	var parts []string
	if a := row["shardcast-async"]; a.ClientCPUns > 0 {
		parts = append(parts, "PublishAsync "+fmtDur(time.Duration(a.ClientCPUns)))
	}
	c := row[ceiling]
	if c.ClientCPUns > 0 {
		parts = append(parts, "the redis-benchmark ceiling's client "+fmtDur(time.Duration(c.ClientCPUns)))
	}
	r := syncRefs{ceilingRate: c.Rate}
	if len(parts) > 0 {
		r.cpu = "; same rounds: " + strings.Join(parts, ", ")
	}
	return r
}

// rate renders the delivered/s a target asks for beside the ceiling's.
func (r syncRefs) rate(want float64) string {
	if r.ceilingRate <= 0 {
		return "; the target is " + fmtRate(want)
	}
	return fmt.Sprintf("; the target is %s, the redis-benchmark ceiling %s", fmtRate(want), fmtRate(r.ceilingRate))
}
