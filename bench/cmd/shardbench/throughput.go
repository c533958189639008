package main

import (
	"context"
	"fmt"
	"runtime"
	"runtime/pprof"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/bench/internal/engines"
	"github.com/shardcast/shardcast/bench/internal/measure"
)

// tpResult is one throughput run.
type tpResult struct {
	Scenario string `json:"scenario"`
	Topology string `json:"topology"`
	Engine   string `json:"engine"`
	// Process is "production-like" (HeapBlockMiB of the -heap block held,
	// FreshPayloads: a payload allocated per publish) or "reference" (no
	// block, one reused payload buffer per publisher); see process.
	Process       string  `json:"process"`
	HeapBlockMiB  int     `json:"heap_block_mib"`
	FreshPayloads bool    `json:"fresh_payloads"`
	Publishers    int     `json:"publishers"`
	Round         int     `json:"round"`
	Channels      int     `json:"channels"`
	PayloadBytes  int     `json:"payload_bytes"`
	Seconds       float64 `json:"seconds"`
	Published     uint64  `json:"published"`
	Delivered     uint64  `json:"delivered"`
	Rate          float64 `json:"delivered_per_sec"`
	P50us         float64 `json:"p50_us"`
	P99us         float64 `json:"p99_us"`
	P999us        float64 `json:"p999_us"`
	ClientCPUns   float64 `json:"client_cpu_ns_per_msg"`
	RedisCPUns    float64 `json:"redis_cpu_ns_per_msg"`
	Connections   int     `json:"connections"`
	AllocsPerMsg  float64 `json:"client_allocs_per_msg"`
	BytesPerMsg   float64 `json:"client_alloc_bytes_per_msg"`
	// GCShare is the runtime's estimate of its collector's share of the
	// process's Go CPU time over window+drain; GCPerSec the collections
	// per second over that time.
	GCShare  float64 `json:"gc_cpu_share"`
	GCPerSec float64 `json:"gc_per_sec"`
	// Dropped and Reconnects are the shardcast broker's Stats over the
	// run: messages its worker queues had no room for, subscribe
	// connections re-established (Redis drops a subscriber at the pubsub
	// output buffer limit when its read loop falls behind).
	Dropped    uint64 `json:"dropped"`
	Reconnects uint64 `json:"reconnects"`
	// RedisBusy and ClientBusy are the cores each used over the measured
	// window (CPU time / wall time): a RedisBusy near 1 means Redis's one
	// command thread is the bound.
	RedisBusy  float64 `json:"redis_busy_cores"`
	ClientBusy float64 `json:"client_busy_cores"`
	// RedisOutBuf is INFO client_recent_max_output_buffer at the end of
	// the window: bytes Redis held for its slowest reader (the subscriber)
	// over the last seconds.
	RedisOutBuf int `json:"redis_max_output_buffer"`
	// CeilingRatio, on an engine's median row, is the median over rounds
	// of its delivered/s divided by the ceiling's in the same round,
	// counting only rounds in which both ran without error (CeilingPairs
	// of them). On a machine shared with other work a busy spell lowers
	// both runs of a round, and often costs the ceiling its subscriber
	// (an error, left out of the ceiling's median): the ratio of medians
	// then sets an engine's busy rounds against the ceiling's quiet ones.
	CeilingRatio  float64 `json:"ceiling_ratio,omitempty"`
	CeilingPairs  int     `json:"ceiling_pairs,omitempty"`
	Note          string  `json:"note,omitempty"`
	Error         string  `json:"error,omitempty"`
	cpu, redisCPU time.Duration
}

const ceiling = "redis-ceiling"

func tuning() engines.Tuning {
	return engines.Tuning{Workers: cfg.scWorkers, SubscribeBatch: cfg.scBatch, ReusePayloads: cfg.scReuse}
}

func channelNames(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = prefix + strconv.Itoa(i)
	}
	return out
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, p := range splitList(s) {
		n, err := strconv.Atoi(p)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("bad number %q", p)
		}
		out = append(out, n)
	}
	return out, nil
}

func engineList(def []string) []string {
	if cfg.engines != "" {
		return splitList(cfg.engines)
	}
	return def
}

// runThroughput measures delivered msgs/s with closed-loop publishers on a
// standalone Redis and on a 3-master cluster.
func runThroughput(ctx context.Context, e *env) (section, error) {
	pubs, err := parseInts(cfg.publishers)
	if err != nil {
		return section{}, err
	}
	sec := section{Name: "throughput", Title: "Throughput"}
	var body strings.Builder
	fmt.Fprintf(&body, "%d channels, %d-byte payloads, closed-loop publisher goroutines calling Publish as fast as it returns, "+
		"round-robin over the channels; the same engine instance (one process) publishes and subscribes. Each run: %s warm-up, %s measured, "+
		"then the subscriber drains. *delivered/s* counts messages stamped inside the measured window and delivered (publish→handler latency from "+
		"the publish timestamp the publisher writes into the first 8 payload bytes just before the call, for every engine); *loss* compares them with the successful publishes stamped in the same window. *client CPU/msg* is getrusage of the "+
		"process (publisher + subscriber) over window+drain divided by delivered messages; *Redis CPU/msg* sums INFO used_cpu_sys+used_cpu_user "+
		"of every server; *conns* is the rise of connected_clients, read after Subscribe and again at the end of the window (the larger; publish pools that dial on demand are full by then). %d interleaved rounds; each column is the median over the rounds, *loss* is over all rounds.\n\n",
		cfg.channels, cfg.payload, cfg.warmup, cfg.duration, cfg.rounds)
	fmt.Fprintf(&body, "The *%s* row is Redis itself: `redis-benchmark -P 16 -c <min(publishers, %d)> -r <channels> PUBLISH bench:__rand_int__ <payload>` "+
		"(as many connections as the row's publishers, at most %[2]d) into one subscriber of all channels that only counts bytes: a raw Go socket "+
		"reader, since every message push has the same size. A `redis-cli SUBSCRIBE` subscriber was tried first and cannot keep up on this "+
		"machine: Redis disconnects it at the pubsub output buffer limit within seconds. Its client CPU is redis-benchmark's (from /proc) plus this "+
		"process's.\n\n", ceiling, ceilingClients)
	fmt.Fprintf(&body, "The *shardcast-async* row is the same sharded broker driven through the opt-in `PublishAsync` (shardcast.AsyncPublisher): "+
		"each publisher goroutine keeps up to %d calls in flight, as redis-benchmark -P %d does per connection, and counts a message when its "+
		"done func hears nil. *shardcast* stays the headline: the synchronous Publish, one call in flight per goroutine.\n\n", asyncWindow, asyncWindow)
	procs := processes()
	body.WriteString(processNote(procs))
	type topology struct {
		name    string
		cluster bool
		def     []string
		procs   int // GOMAXPROCS while it runs
	}
	topos := []topology{
		{"standalone", false, []string{"shardcast", "shardcast-async", "centrifuge", "go-redis", ceiling}, clientProcs},
		{"cluster-3", true, []string{"shardcast-cluster", "centrifuge-sharded", "centrifuge-sharded-tags", "go-redis-cluster"}, clientProcs},
	}
	if cfg.allCores && clientProcs < runtime.NumCPU() {
		topos = append(topos, topology{allCores, false, []string{"shardcast", "centrifuge", "go-redis"}, runtime.NumCPU()})
	}
	defer runtime.GOMAXPROCS(clientProcs)
	defer holdHeap(0)
	// medians[i] are the medians of procs[i]: topo → pubs → engine.
	medians := make([]map[string]map[int]map[string]tpResult, len(procs))
	for i := range medians {
		medians[i] = map[string]map[int]map[string]tpResult{}
	}
	var topoNames []string
	engineNames := map[string][]string{}
	for _, topo := range topos {
		runtime.GOMAXPROCS(topo.procs)
		var names []string
		for _, n := range engineList(topo.def) {
			if n == ceiling {
				if !topo.cluster {
					names = append(names, n)
				}
				continue
			}
			k, err := engines.Lookup(n)
			if err != nil {
				return sec, err
			}
			if k.Cluster == topo.cluster {
				names = append(names, n)
			}
		}
		if len(names) == 0 {
			continue
		}
		var target engines.Target
		var servers []string
		if topo.cluster {
			c, err := e.Cluster(ctx, 3)
			if err != nil {
				return sec, err
			}
			target.Cluster = c
			m, err := slotMap(ctx, c)
			if err != nil {
				return sec, err
			}
			servers = masters(m)
		} else {
			s, err := e.Standalone()
			if err != nil {
				return sec, err
			}
			target.Standalone, servers = s, s
		}
		topoNames = append(topoNames, topo.name)
		engineNames[topo.name] = names
		for i := range procs {
			medians[i][topo.name] = map[int]map[string]tpResult{}
		}
		// Each round runs every engine in the production-like process,
		// then every engine in the reference one (one change of heap block
		// per round: holdHeap's first touch of the headroom takes seconds),
		// then the ceiling, whose process is its own (its subscriber counts
		// bytes and allocates nothing per message), once.
		var engs []string
		hasCeiling := false
		for _, name := range names {
			if name == ceiling {
				hasCeiling = true
			} else {
				engs = append(engs, name)
			}
		}
		perRound := len(engs) * len(procs)
		if hasCeiling {
			perRound++
		}
		total := len(pubs) * cfg.rounds * perRound
		n := 0
		rows := make([][][]string, len(procs))
		for _, p := range pubs {
			runs := make([]map[string][]tpResult, len(procs))
			for i := range runs {
				runs[i] = map[string][]tpResult{}
			}
			for round := 1; round <= cfg.rounds; round++ {
				for i, proc := range procs {
					list := engs
					if hasCeiling && i == len(procs)-1 {
						list = append(slices.Clip(engs), ceiling)
					}
					for _, name := range list {
						if ctx.Err() != nil {
							return sec, ctx.Err()
						}
						n++
						var r tpResult
						if name == ceiling {
							progress("[%s %d/%d] %s publishers=%d round %d …", topo.name, n, total, name, p, round)
							r = ceilingRun(ctx, servers[0], p)
						} else {
							progress("[%s %d/%d] %s (%s) publishers=%d round %d …", topo.name, n, total, name, proc.name(), p, round)
							k, _ := engines.Lookup(name)
							r = throughputRun(ctx, k, target, servers, p, proc)
						}
						slot := i
						if name == ceiling {
							slot = 0 // one set of ceiling runs, beside the production-like rows
						}
						r.Scenario, r.Topology, r.Engine, r.Publishers, r.Round = "throughput", topo.name, name, p, round
						emit(r)
						if r.Error != "" {
							progress("   error: %s", r.Error)
						} else {
							progress("   %s delivered/s, p99 %s, client %s/msg (%.2f cores), GC %.0f%% (%.0f/s), redis %s/msg (%.2f cores, max output buffer %s), conns %d, dropped %d, reconnects %d", fmtRate(r.Rate),
								fmtDur(time.Duration(r.P99us*1e3)), fmtDur(time.Duration(r.ClientCPUns)), r.ClientBusy, 100*r.GCShare, r.GCPerSec, fmtDur(time.Duration(r.RedisCPUns)), r.RedisBusy,
								fmtBytes(r.RedisOutBuf), r.Connections, r.Dropped, r.Reconnects)
						}
						runs[slot][name] = append(runs[slot][name], r)
					}
				}
			}
			for i := range procs {
				medians[i][topo.name][p] = map[string]tpResult{}
				for _, name := range names {
					if name == ceiling && i > 0 {
						continue
					}
					m := median(runs[i][name])
					if name != ceiling {
						m.CeilingRatio, m.CeilingPairs = pairedRatio(runs[i][name], runs[0][ceiling])
					}
					m.Scenario, m.Round = "throughput-median", 0
					emit(m)
					medians[i][topo.name][p][name] = m
					rows[i] = append(rows[i], tpRow(m, len(runs[i][name])))
				}
			}
		}
		fmt.Fprintf(&body, "### %s\n\n", topoTitle(topo.name))
		for i, proc := range procs {
			caption := fmt.Sprintf("Production-like rows (%s):", proc)
			if proc.ref {
				caption = fmt.Sprintf("Reference rows, the same rounds (%s):", proc)
			}
			fmt.Fprintf(&body, "%s\n\n", caption)
			body.WriteString(table(tpHead, rows[i]))
			body.WriteString("\n")
			show(fmt.Sprintf("throughput, %s, %s\n%s", topo.name, proc.name(), table(tpHead, rows[i])))
		}
	}
	var ref map[string]map[int]map[string]tpResult
	if len(procs) > 1 {
		ref = medians[1]
		cmp := processTable(medians[0], ref, topoNames, engineNames)
		body.WriteString(cmp)
		show(cmp)
	}
	ratios, targets := throughputTargets(medians[0], ref)
	body.WriteString(ratios)
	show(ratios)
	sec.Body, sec.Targets = body.String(), targets
	return sec, nil
}

// allCores names the standalone pass whose client runs on every core,
// sharing them with Redis.
const allCores = "standalone-all-cores"

func topoTitle(t string) string {
	switch t {
	case "standalone":
		return fmt.Sprintf("One standalone Redis (client GOMAXPROCS %d)", clientProcs)
	case allCores:
		return fmt.Sprintf("One standalone Redis, client on every core (GOMAXPROCS %d, sharing them with Redis)", runtime.NumCPU())
	}
	return fmt.Sprintf("Redis Cluster, 3 masters, no replicas, 128 partitions (client GOMAXPROCS %d)", clientProcs)
}

var tpHead = []string{"engine", "publishers", "delivered/s", "p50", "p99", "p99.9", "client CPU/msg", "client allocs/msg", "GC", "Redis CPU/msg", "conns", "loss", "runs"}

func tpRow(r tpResult, runs int) []string {
	if r.Error != "" && r.Delivered == 0 {
		return []string{r.Engine, strconv.Itoa(r.Publishers), "error: " + r.Error, "", "", "", "", "", "", "", "", "", strconv.Itoa(runs)}
	}
	loss := "0"
	if r.Published > r.Delivered && r.Published > 0 {
		loss = fmt.Sprintf("%.2f%%", 100*float64(r.Published-r.Delivered)/float64(r.Published))
	}
	allocs := fmt.Sprintf("%.1f (%.0f B)", r.AllocsPerMsg, r.BytesPerMsg)
	gc := fmt.Sprintf("%.0f%% (%.0f/s)", 100*r.GCShare, r.GCPerSec)
	if r.Engine == ceiling {
		allocs, gc = "–", "–"
	}
	us := func(v float64) string {
		if v == 0 {
			return "–"
		}
		return fmtDur(time.Duration(v * 1e3))
	}
	return []string{r.Engine, strconv.Itoa(r.Publishers), fmtRate(r.Rate), us(r.P50us), us(r.P99us), us(r.P999us),
		fmtDur(time.Duration(r.ClientCPUns)), allocs, gc, fmtDur(time.Duration(r.RedisCPUns)), strconv.Itoa(r.Connections), loss, strconv.Itoa(runs)}
}

// medianOf returns the median of get over rs (rs not empty).
func medianOf[T any](rs []T, get func(T) float64) float64 {
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = get(r)
	}
	sort.Float64s(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

// pairedRatio returns the median over rounds of a[i].Rate / c[i].Rate,
// the runs of an engine and of the ceiling in round i, over the rounds in
// which both ran without error, and how many rounds that was.
func pairedRatio(a, c []tpResult) (float64, int) {
	var rs []float64
	for i := range min(len(a), len(c)) {
		if a[i].Error == "" && c[i].Error == "" && a[i].Rate > 0 && c[i].Rate > 0 {
			rs = append(rs, a[i].Rate/c[i].Rate)
		}
	}
	if len(rs) == 0 {
		return 0, 0
	}
	return medianOf(rs, func(v float64) float64 { return v }), len(rs)
}

// median combines the error-free runs of one engine: every numeric
// column is the median of that column over the runs (so one disturbed
// round moves no column far), published/delivered are summed.
func median(rs []tpResult) tpResult {
	var ok []tpResult
	for _, r := range rs {
		if r.Error == "" {
			ok = append(ok, r)
		}
	}
	if len(ok) == 0 {
		if len(rs) > 0 {
			return rs[0]
		}
		return tpResult{}
	}
	med := func(get func(tpResult) float64) float64 { return medianOf(ok, get) }
	m := ok[0]
	m.Round = 0
	m.Published, m.Delivered = 0, 0
	for _, r := range ok {
		m.Published += r.Published
		m.Delivered += r.Delivered
	}
	m.Rate = med(func(r tpResult) float64 { return r.Rate })
	m.P50us = med(func(r tpResult) float64 { return r.P50us })
	m.P99us = med(func(r tpResult) float64 { return r.P99us })
	m.P999us = med(func(r tpResult) float64 { return r.P999us })
	m.ClientCPUns = med(func(r tpResult) float64 { return r.ClientCPUns })
	m.RedisCPUns = med(func(r tpResult) float64 { return r.RedisCPUns })
	m.AllocsPerMsg = med(func(r tpResult) float64 { return r.AllocsPerMsg })
	m.BytesPerMsg = med(func(r tpResult) float64 { return r.BytesPerMsg })
	m.GCShare = med(func(r tpResult) float64 { return r.GCShare })
	m.GCPerSec = med(func(r tpResult) float64 { return r.GCPerSec })
	m.Connections = int(med(func(r tpResult) float64 { return float64(r.Connections) }))
	return m
}

// window tells the receive callback which messages count.
type window struct {
	start, end atomic.Int64 // UnixNano; end = 0 while open
}

// plan fixes the window, from warmup after now for duration, before
// publishers stamp anything: the publisher and the receiver test a stamp at
// different moments, and a bound stored while stamps near it were being
// tested made them judge one differently (a loss of 1 for a lossless
// engine). It returns the bounds.
func (w *window) plan(warmup, duration time.Duration) (t0, t1 time.Time) {
	t0 = time.Now().Add(warmup)
	t1 = t0.Add(duration)
	w.start.Store(t0.UnixNano())
	w.end.Store(t1.UnixNano())
	return t0, t1
}

func (w *window) contains(t int64) bool {
	s := w.start.Load()
	if s == 0 || t < s {
		return false
	}
	e := w.end.Load()
	return e == 0 || t <= e
}

// throughputRun runs one engine in proc: subscribe all channels, publish
// for warm-up + duration from p goroutines, drain, measure.
func throughputRun(ctx context.Context, k engines.Kind, t engines.Target, servers []string, p int, proc process) (res tpResult) {
	res.Channels, res.PayloadBytes = cfg.channels, cfg.payload
	res.Process, res.HeapBlockMiB, res.FreshPayloads = proc.name(), proc.heapMiB, proc.fresh
	holdHeap(proc.heapMiB)
	// The engine's and the publishers' goroutines inherit these labels, so
	// that a -cpuprofile of a run with both processes can be read for one
	// (go tool pprof -tagfocus process=reference).
	pprof.SetGoroutineLabels(pprof.WithLabels(ctx, pprof.Labels("engine", k.Name, "process", proc.name())))
	defer pprof.SetGoroutineLabels(ctx)
	var win window
	var hist measure.Histogram
	var total atomic.Uint64
	// Every engine is timed from the stamp the publisher wrote into the
	// payload, the same instant its publish is counted by (shardcast's
	// PublishedAt is read later, inside Publish, and cut to microseconds).
	recv := func(_ string, payload []byte, _ time.Time) {
		total.Add(1)
		sentAt := engines.Stamped(payload)
		if win.contains(sentAt.UnixNano()) {
			hist.Record(time.Since(sentAt))
		}
	}
	base := measure.Clients(servers)
	eng, err := k.New(t, tuning(), recv)
	if err != nil {
		res.Error = err.Error()
		return res
	}
	defer closeAndSettle(eng, servers, base)
	names := channelNames(fmt.Sprintf("tp:%s:%d:", k.Name, time.Now().UnixNano()%1e6), cfg.channels)
	sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	err = eng.Subscribe(sctx, names)
	cancel()
	if err != nil {
		res.Error = "subscribe: " + err.Error()
		return res
	}
	res.Connections = measure.Clients(servers) - base

	t0, t1 := win.plan(cfg.warmup, cfg.duration)
	var pubs *publishers
	if ae, ok := eng.(engines.AsyncEngine); ok {
		pubs = startAsyncPublishers(ctx, &win, p, cfg.payload, proc.fresh, names, ae)
	} else {
		pubs = startPublishers(ctx, &win, p, cfg.payload, proc.fresh, names, 0, func(_ int, ch string, buf []byte) error {
			return eng.Publish(ctx, ch, buf)
		})
	}
	sleepCtx(ctx, time.Until(t0))
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	cpu0, rcpu0, rt0, at0 := measure.ProcessCPU(), measure.RedisCPU(servers), measure.ReadRuntime(), time.Now()
	sleepCtx(ctx, time.Until(t1))
	wcpu, wrcpu := measure.ProcessCPU(), measure.RedisCPU(servers)
	res.ClientBusy = (wcpu - cpu0).Seconds() / t1.Sub(t0).Seconds()
	res.RedisBusy = (wrcpu - rcpu0).Seconds() / t1.Sub(t0).Seconds()
	res.RedisOutBuf = measure.IntField(servers[0], "clients", "client_recent_max_output_buffer")
	// Count again while the publishers still run: pools that dial on
	// demand (go-redis: up to 10 × GOMAXPROCS) hold no connection yet
	// right after Subscribe.
	res.Connections = max(res.Connections, measure.Clients(servers)-base)
	pubs.halt()
	drain(&total, pubs.sent(), 5*time.Second)
	cpu1, rcpu1, rt1 := measure.ProcessCPU(), measure.RedisCPU(servers), measure.ReadRuntime()
	if se, ok := eng.(interface{ Stats() shardcast.Stats }); ok {
		st := se.Stats()
		res.Dropped, res.Reconnects = st.Dropped, st.Reconnects
	}
	runtime.ReadMemStats(&ms1)
	res.GCShare = rt0.GCShare(rt1)
	if d := time.Since(at0).Seconds(); d > 0 {
		res.GCPerSec = float64(ms1.NumGC-ms0.NumGC) / d
	}

	res.Seconds = t1.Sub(t0).Seconds()
	// Published and Delivered are the same set, messages stamped inside
	// [t0, t1]: publishes that completed in the window (what was counted
	// here before) include those stamped before t0 and miss those in
	// flight at t1, which do not cancel when the number in flight changes.
	res.Published = pubs.inWindow()
	res.Delivered = hist.Count()
	res.Rate = float64(res.Delivered) / res.Seconds
	res.P50us = float64(hist.Quantile(0.5)) / 1e3
	res.P99us = float64(hist.Quantile(0.99)) / 1e3
	res.P999us = float64(hist.Quantile(0.999)) / 1e3
	res.cpu, res.redisCPU = cpu1-cpu0, rcpu1-rcpu0
	if res.Delivered > 0 {
		res.ClientCPUns = float64(res.cpu) / float64(res.Delivered)
		res.RedisCPUns = float64(res.redisCPU) / float64(res.Delivered)
		res.AllocsPerMsg = float64(ms1.Mallocs-ms0.Mallocs) / float64(res.Delivered)
		res.BytesPerMsg = float64(ms1.TotalAlloc-ms0.TotalAlloc) / float64(res.Delivered)
	}
	if v := pubs.firstErr.Load(); v != nil {
		res.Note = "publish errors, first: " + v.(string)
		if res.Delivered == 0 {
			res.Error = res.Note
		}
	}
	return res
}

// closeAndSettle closes an engine and waits (at most 5 s) until the
// servers hold no more connections than before it started, so the next
// run's connection count starts clean (some engines close asynchronously).
func closeAndSettle(eng engines.Engine, servers []string, base int) {
	_ = eng.Close()
	deadline := time.Now().Add(5 * time.Second)
	for measure.Clients(servers) > base && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
}

// drain waits until every published message arrived or deliveries stop
// for 300 ms (lost messages), at most max.
func drain(total *atomic.Uint64, want uint64, max time.Duration) {
	deadline := time.Now().Add(max)
	last, lastChange := total.Load(), time.Now()
	for time.Now().Before(deadline) {
		cur := total.Load()
		if cur >= want {
			return
		}
		if cur != last {
			last, lastChange = cur, time.Now()
		} else if time.Since(lastChange) > 300*time.Millisecond {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
