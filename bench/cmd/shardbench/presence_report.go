package main

import "strconv"

// presReport turns a presence run's results into its tables (see
// callReport); presence adds no column of its own to the medians.
func presReport(all []presResult, topos []callTopo, ops, names []string) callTables[presResult] {
	return callReport(all, topos, ops, names, callColumns[presResult]{
		engine:  "manager",
		median:  presMedian,
		conns:   []string{"nodes", "conns per master", "commands", "subscribed", "idle", "per node per master"},
		connRow: presConnRow,
	})
}

// key is the report row r belongs to.
func (r *presResult) key() callKey { return callKey{r.Topology, r.Op, r.Manager} }

// presMedian combines one row's runs as medianRun does, into a row of
// scenario presence-median and round 0.
func presMedian(rs []presResult, servers []string) presResult {
	m, ok := medianRun(rs, servers)
	m.Scenario = "presence-median"
	if len(ok) > 0 {
		m.Round = 0
	}
	return m
}

// presConnRow is a row of the connection table after its topology and
// manager: the commands connections first, as a presence manager uses
// them.
func presConnRow(t callTopo, m *callResult) []string {
	return []string{strconv.Itoa(cfg.presNodes), perMaster(m.Conns, t.Servers), perMaster(m.CmdConns, t.Servers),
		perMaster(m.PubSubConns, t.Servers), perMaster(m.OtherConns, t.Servers), perNodeMaster(m.Conns, t.Servers, cfg.presNodes)}
}
