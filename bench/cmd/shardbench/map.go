package main

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// The map scenario sets contrib/centrifugebroker's MapBroker beside
// Centrifuge's RedisMapBroker (issue 43): closed-loop workers call
// Publish or ReadState on many map channels through the map brokers of
// -map-nodes nodes, each node subscribed to every channel so that live
// updates flow, on one standalone Redis and on the 3-master cluster, the
// two brokers interleaved round by round.

// mapResult is one map run: one broker, one call, one topology.
type mapResult struct {
	Scenario string  `json:"scenario"`
	Topology string  `json:"topology"`
	Broker   string  `json:"broker"`
	Op       string  `json:"op"`
	Round    int     `json:"round"`
	Nodes    int     `json:"nodes"`
	Workers  int     `json:"workers"`
	Channels int     `json:"channels"`
	Keys     int     `json:"keys_per_channel"`
	Payload  int     `json:"payload"`
	Seconds  float64 `json:"seconds"`
	// callResult is what the run measured of the calls; a suppressed
	// publish and a state read with fewer entries than kept count as
	// Short.
	callResult
	// LivePerOp is the live updates the nodes' handlers received in the
	// window per call: Nodes for a publish that reached every node.
	LivePerOp float64 `json:"live_updates_per_op"`
	// LiveMissed is how many of the live updates owed for every
	// successful publish of the run (the fill's included), one per node,
	// had not arrived 5 s after the last call.
	LiveMissed uint64 `json:"live_updates_missed"`
}

// mapTitle is the section's heading; -update finds the section by it.
const mapTitle = "Map channels: contrib/centrifugebroker's MapBroker against Centrifuge's RedisMapBroker"

// runMap runs every call of -map-ops on both topologies, the brokers
// interleaved round by round, and builds the section.
func runMap(ctx context.Context, e *env) (section, error) {
	sec := section{Name: "map", Title: mapTitle}
	ops, err := mapOpsOf(cfg.mapOps)
	if err != nil {
		return sec, err
	}
	if cfg.mapNodes < 1 || cfg.mapWorkers < 1 || cfg.mapChannels < 1 || cfg.mapKeys < 1 || cfg.mapPayload < 1 {
		return sec, errors.New("-map-nodes, -map-workers, -map-channels, -map-keys and -map-payload must be positive")
	}
	rep, err := runCalls(ctx, e, callScenario[mapResult]{
		name: "map", engine: "broker", ops: ops,
		run: mapRun,
		runNote: func(r mapResult, t callTopo) string {
			return fmt.Sprintf("live/op %.2f, conns per master %s (subscribed %s)", r.LivePerOp, perMaster(r.Conns, t.Servers),
				perMaster(r.PubSubConns, t.Servers))
		},
		report: mapReport,
	})
	if err != nil {
		return sec, err
	}
	sec.Body = mapIntro() + rep.runs + "\n" + mapRatioNote + rep.ratios + "\n" + mapConnsNote() + rep.conns
	return sec, nil
}

// mapRun runs one broker's call op for warm-up + duration on t, with
// -map-nodes nodes started afresh, each subscribed to every channel, as
// round round (0: the warm-up).
func mapRun(ctx context.Context, name, op string, t callTopo, round int) (res mapResult) {
	res.Scenario, res.Round = "map", round
	res.Topology, res.Broker, res.Op = t.Name, name, op
	res.Nodes, res.Workers, res.Channels, res.Keys, res.Payload = cfg.mapNodes, cfg.mapWorkers, cfg.mapChannels, cfg.mapKeys, cfg.mapPayload
	holdHeap(cfg.heap) // touches the headroom again: see holdHeap
	base := masterConns(t.Servers)
	w := newMapWorkload(fmt.Sprintf("map:%s:", name), cfg.mapChannels, cfg.mapKeys, cfg.mapPayload)
	var nodes []*mapNode
	defer func() {
		for _, nd := range nodes {
			nd.close()
		}
		settleConns(t.Servers, base)
	}()
	for range cfg.mapNodes {
		nd, err := newMapNode(name, t, w.channels)
		if err != nil {
			res.Error = "start node: " + err.Error()
			return res
		}
		nodes = append(nodes, nd)
	}
	load := func(op string) callLoad {
		return callLoad{workers: cfg.mapWorkers, call: func(g, i int) (bool, error) { return w.call(ctx, nodes[g%len(nodes)].mb, op, i) }}
	}
	// The fill publishes every key of every channel, so that a
	// ReadState finds them all.
	fill := len(w.channels) * len(w.keys)
	if err := load("publish").fill(ctx, fill); err != nil {
		res.Error = "fill: " + err.Error()
		return res
	}
	l := load(op)
	l.probe = func() uint64 { return mapLive(nodes) }
	m := l.measure(ctx, t.Servers, base)
	res.callResult, res.Seconds = m.callResult, m.Seconds
	published := uint64(fill)
	if op == "publish" {
		published += m.Calls
	}
	res.LiveMissed = mapAwaitLive(nodes, uint64(len(nodes))*published, 5*time.Second)
	if res.Ops > 0 {
		// The window of live updates is the window of the calls, give
		// or take those in flight.
		res.LivePerOp = float64(m.Probed) / float64(res.Ops)
	}
	return res
}

// mapLive is the live updates every node's handler received so far.
func mapLive(nodes []*mapNode) uint64 {
	var n uint64
	for _, nd := range nodes {
		n += nd.live.n.Load()
	}
	return n
}

// mapAwaitLive waits, up to timeout, until the nodes' handlers received
// want live updates in all, and returns how many were still missing.
func mapAwaitLive(nodes []*mapNode, want uint64, timeout time.Duration) uint64 {
	deadline := time.Now().Add(timeout)
	for {
		got := mapLive(nodes)
		if got >= want {
			return 0
		}
		if time.Now().After(deadline) {
			return want - got
		}
		time.Sleep(10 * time.Millisecond)
	}
}
