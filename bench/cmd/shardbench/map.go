package main

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardcast/shardcast/bench/internal/measure"
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
	// LivePerOp is the live updates the nodes' handlers received in the
	// window per call: Nodes for a publish that reached every node.
	LivePerOp float64 `json:"live_updates_per_op"`
	// LiveMissed is how many of the live updates owed for every
	// successful publish of the run (the fill's included), one per node,
	// had not arrived 5 s after the last call.
	LiveMissed uint64 `json:"live_updates_missed"`
	// Conns is every connection the nodes hold per master, counted with
	// CLIENT LIST at the end of the window minus those there before the
	// nodes, split by kind as presResult's.
	Conns       map[string]int `json:"connections_per_master"`
	CmdConns    map[string]int `json:"command_connections_per_master"`
	PubSubConns map[string]int `json:"pubsub_connections_per_master"`
	OtherConns  map[string]int `json:"other_connections_per_master"`
	// Failed counts calls that returned an error, Short suppressed
	// publishes and state reads with fewer entries than kept, over the
	// whole run.
	Failed uint64 `json:"failed"`
	Short  uint64 `json:"short"`
	Note   string `json:"note,omitempty"`
	Error  string `json:"error,omitempty"`
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
	names := engineList([]string{centAdapter, centRedis})
	for _, n := range names {
		if n != centAdapter && n != centRedis {
			return sec, fmt.Errorf("map scenario: unknown broker %q (have %s, %s)", n, centAdapter, centRedis)
		}
	}
	sa, err := e.Standalone()
	if err != nil {
		return sec, err
	}
	seeds, _, servers, err := e.clusterMasters(ctx, 3)
	if err != nil {
		return sec, err
	}
	topos := []presTopo{{Name: "standalone", Addrs: sa[:1], Servers: sa[:1]}, {Name: "cluster-3", Addrs: seeds, Servers: servers}}

	holdHeap(cfg.heap)
	defer holdHeap(0)
	// As in the presence scenario, one run that is not measured takes the
	// place of a process's first, which can measure less CPU.
	progress("[map] warm-up run of %s, not measured …", names[0])
	if r := mapRun(ctx, names[0], ops[0], topos[0]); r.Error != "" {
		progress("   warm-up error: %s", r.Error)
	}
	var all []mapResult
	total, n := len(topos)*len(ops)*cfg.rounds*len(names), 0
	for _, t := range topos {
		for _, op := range ops {
			for round := 1; round <= cfg.rounds; round++ {
				for _, name := range names {
					if ctx.Err() != nil {
						return sec, ctx.Err()
					}
					n++
					progress("[map %d/%d] %s, %s, %s, round %d …", n, total, t.Name, name, op, round)
					r := mapRun(ctx, name, op, t)
					r.Scenario, r.Round = "map", round
					emit(r)
					if r.Error != "" {
						progress("   error: %s", r.Error)
					} else {
						progress("   %s ops/s, p50 %s, p99 %s, client CPU/op %s, Redis CPU/op %s, live/op %.2f, conns per master %s (subscribed %s)",
							fmtRate(r.Rate), fmtDur(time.Duration(r.P50us*1e3)), fmtDur(time.Duration(r.P99us*1e3)), fmtDur(time.Duration(r.ClientCPUns)),
							fmtDur(time.Duration(r.RedisCPUns)), r.LivePerOp, perMaster(r.Conns, t.Servers), perMaster(r.PubSubConns, t.Servers))
					}
					all = append(all, r)
				}
			}
		}
	}
	rep := mapReport(all, topos, ops, names)
	for _, m := range rep.medians {
		m.Scenario = "map-median"
		emit(m)
	}
	show("map\n" + rep.runs + "\n" + rep.ratios + "\n" + rep.conns)
	sec.Body = mapIntro() + rep.runs + "\n" + mapRatioNote + rep.ratios + "\n" + mapConnsNote() + rep.conns
	return sec, nil
}

// mapRun runs one broker's call op for warm-up + duration on t, with
// -map-nodes nodes started afresh, each subscribed to every channel.
func mapRun(ctx context.Context, name, op string, t presTopo) (res mapResult) {
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
	if err := mapFill(ctx, nodes, w); err != nil {
		res.Error = "fill: " + err.Error()
		return res
	}

	var win window
	var hist measure.Histogram
	counts := make([]pubCount, cfg.mapWorkers)
	var failed, short atomic.Uint64
	var firstErr atomic.Value
	var stop atomic.Bool
	var wg sync.WaitGroup
	t0, t1 := win.plan(cfg.warmup, cfg.duration)
	for g := range cfg.mapWorkers {
		wg.Go(func() {
			mb := nodes[g%len(nodes)].mb
			for i := g; !stop.Load() && ctx.Err() == nil; i += cfg.mapWorkers {
				start := time.Now()
				sh, err := w.call(ctx, mb, op, i)
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					time.Sleep(time.Millisecond)
					continue
				}
				if sh {
					short.Add(1)
				}
				counts[g].n.Add(1)
				if win.contains(start.UnixNano()) {
					counts[g].inWin.Add(1)
					hist.Record(time.Since(start))
				}
			}
		})
	}
	sleepCtx(ctx, time.Until(t0))
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	cpu0, rcpu0, rt0, live0 := measure.ProcessCPU(), measure.RedisCPU(t.Servers), measure.ReadRuntime(), mapLive(nodes)
	sleepCtx(ctx, time.Until(t1))
	cpu1, rcpu1, rt1, live1 := measure.ProcessCPU(), measure.RedisCPU(t.Servers), measure.ReadRuntime(), mapLive(nodes)
	runtime.ReadMemStats(&ms1)
	conns := masterConns(t.Servers)
	stop.Store(true)
	wg.Wait()
	published := uint64(len(w.channels) * len(w.keys))
	if op == "publish" {
		for i := range counts {
			published += counts[i].n.Load()
		}
	}
	res.LiveMissed = mapAwaitLive(nodes, uint64(len(nodes))*published, 5*time.Second)

	res.Conns, res.CmdConns, res.PubSubConns, res.OtherConns = map[string]int{}, map[string]int{}, map[string]int{}, map[string]int{}
	for _, s := range t.Servers {
		c, b := conns[s], base[s]
		res.CmdConns[s], res.PubSubConns[s], res.OtherConns[s] = c.publish-b.publish, c.pubsub-b.pubsub, c.other-b.other
		res.Conns[s] = res.CmdConns[s] + res.PubSubConns[s] + res.OtherConns[s]
	}
	res.Seconds = t1.Sub(t0).Seconds()
	for i := range counts {
		res.Ops += counts[i].inWin.Load()
	}
	res.Rate = float64(res.Ops) / res.Seconds
	res.P50us = float64(hist.Quantile(0.5)) / 1e3
	res.P99us = float64(hist.Quantile(0.99)) / 1e3
	res.GCShare = rt0.GCShare(rt1)
	if res.Ops > 0 {
		// The CPU window and the calls started in it are the same span,
		// give or take one call per goroutine at each end; so is the
		// window of live updates, give or take those in flight.
		res.ClientCPUns = float64(cpu1-cpu0) / float64(res.Ops)
		res.RedisCPUns = float64(rcpu1-rcpu0) / float64(res.Ops)
		res.AllocsPerOp = float64(ms1.Mallocs-ms0.Mallocs) / float64(res.Ops)
		res.LivePerOp = float64(live1-live0) / float64(res.Ops)
	}
	res.Failed, res.Short = failed.Load(), short.Load()
	if v := firstErr.Load(); v != nil {
		res.Note = "call errors, first: " + v.(string)
		if res.Ops == 0 {
			res.Error = res.Note
		}
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

// mapFill publishes every key of every channel of w through the nodes,
// from -map-workers goroutines, so that each run starts with the same
// entries in Redis (and their TTL fresh) and a ReadState finds them all.
func mapFill(ctx context.Context, nodes []*mapNode, w *mapWorkload) error {
	n := len(w.channels) * len(w.keys)
	var wg sync.WaitGroup
	var first atomic.Value
	for g := range cfg.mapWorkers {
		wg.Go(func() {
			mb := nodes[g%len(nodes)].mb
			for i := g; i < n && ctx.Err() == nil; i += cfg.mapWorkers {
				if _, err := w.call(ctx, mb, "publish", i); err != nil {
					first.CompareAndSwap(nil, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err, ok := first.Load().(error); ok {
		return err
	}
	return ctx.Err()
}
