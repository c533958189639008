package main

import (
	"fmt"
	"strconv"
)

// mapReport turns a map run's results into its tables (see callReport),
// with the live updates as columns of their own.
func mapReport(all []mapResult, topos []callTopo, ops, names []string) callTables[mapResult] {
	return callReport(all, topos, ops, names, callColumns[mapResult]{
		engine:   "broker",
		median:   mapMedian,
		own:      []string{"live/op", "live missed"},
		ownCells: mapLiveCells,
		conns: []string{"nodes", "conns per master", "subscribed", "commands", "idle", "subscribed per node per master",
			"all per node per master"},
		connRow: mapConnRow,
	})
}

// key is the report row r belongs to.
func (r *mapResult) key() callKey { return callKey{r.Topology, r.Op, r.Broker} }

// mapMedian combines one row's runs as medianRun does, into a row of
// scenario map-median and round 0, with live/op the median and live
// missed the sum over the error-free runs.
func mapMedian(rs []mapResult, servers []string) mapResult {
	m, ok := medianRun(rs, servers)
	m.Scenario = "map-median"
	if len(ok) == 0 {
		return m
	}
	m.Round, m.LiveMissed = 0, 0
	for _, r := range ok {
		m.LiveMissed += r.LiveMissed
	}
	m.LivePerOp = medianOf(ok, func(r mapResult) float64 { return r.LivePerOp })
	return m
}

// mapLiveCells are the live/op and live missed columns of a median; live
// updates per call mean something for publishes only.
func mapLiveCells(r mapResult) []string {
	live := "–"
	if r.Op == "publish" {
		live = fmt.Sprintf("%.2f", r.LivePerOp)
	}
	return []string{live, strconv.FormatUint(r.LiveMissed, 10)}
}

// mapConnRow is a row of the connection table after its topology and
// broker: the subscribed connections first, and per node and master
// apart, since a map broker's subscriptions are what sets the two
// brokers apart.
func mapConnRow(t callTopo, m *callResult) []string {
	return []string{strconv.Itoa(cfg.mapNodes), perMaster(m.Conns, t.Servers), perMaster(m.PubSubConns, t.Servers),
		perMaster(m.CmdConns, t.Servers), perMaster(m.OtherConns, t.Servers), perNodeMaster(m.PubSubConns, t.Servers, cfg.mapNodes),
		perNodeMaster(m.Conns, t.Servers, cfg.mapNodes)}
}
