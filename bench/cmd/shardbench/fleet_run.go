package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardcast/shardcast/bench/internal/engines"
	"github.com/shardcast/shardcast/bench/internal/launch"
	"github.com/shardcast/shardcast/bench/internal/measure"
)

type fleetResult struct {
	Scenario       string             `json:"scenario"`
	Engine         string             `json:"engine"`
	Brokers        int                `json:"brokers"`
	Channels       int                `json:"channels_per_broker"`
	SubscribeSecs  float64            `json:"initial_subscribe_secs"`
	MaxClients     map[string]int     `json:"maxclients_per_master"`
	Conns          map[string]int     `json:"connections_per_master"`
	SubConns       map[string]int     `json:"subscribe_connections_per_master_before"`
	SubConnsAfter  map[string]int     `json:"subscribe_connections_per_master_after"`
	Killed         int                `json:"killed_connections"`
	KillMethod     string             `json:"kill_method"`
	SsubPerMaster  map[string]int     `json:"ssubscribe_calls_per_master"`
	HeapBytes      uint64             `json:"live_heap_after_subscribe_bytes"`
	Probes         int                `json:"probe_channels"`
	ProbePublishes int64              `json:"probe_publishes"`
	LongestSweepms float64            `json:"longest_probe_sweep_ms"`
	ResubSecs      float64            `json:"all_subscribed_secs"`
	RestoredSecs   float64            `json:"last_restored_event_secs,omitempty"`
	DeliverSecs    float64            `json:"last_probe_delivered_secs"`
	RecoverSecs    float64            `json:"recovered_secs"`
	PeakCPU        map[string]float64 `json:"peak_redis_cpu_pct_per_master"`
	PeakCPUSum     float64            `json:"peak_redis_cpu_pct_sum"`
	MasterCPUms    map[string]float64 `json:"redis_cpu_ms_per_master"`
	RedisCPUms     float64            `json:"redis_cpu_ms"`
	ClientCPUms    float64            `json:"client_cpu_ms"`
	ProbeCPUms     float64            `json:"probe_publish_cpu_ms,omitempty"`
	ClientWaitms   float64            `json:"client_run_queue_wait_ms"`
	MasterWaitms   map[string]float64 `json:"redis_run_queue_wait_ms_per_master"`
	Error          string             `json:"error,omitempty"`
}

// busiest returns the master that spent the most CPU during the storm and
// that CPU as a share of the storm's length, in percent of one core.
func (r fleetResult) busiest() (string, float64) {
	addr, most := "", -1.0
	for s, ms := range r.MasterCPUms {
		if ms > most || (ms == most && s < addr) {
			addr, most = s, ms
		}
	}
	if r.RecoverSecs <= 0 {
		return addr, 0
	}
	return addr, 100 * most / (1000 * r.RecoverSecs)
}

// fleetSample is how often the scenario reads INFO cpu of every master.
const fleetSample = 50 * time.Millisecond

// fleetSweep is the pause between two probe sweeps of one broker.
const fleetSweep = 20 * time.Millisecond

// fleetLimit is how long a storm may take before the run gives up on it:
// Centrifuge's fleet of 20 took 100-294 s here, the longer while other
// work shared the machine's two cores.
const fleetLimit = 10 * time.Minute

// fleetSide is the profiler label of the probe goroutines: their publishes
// are the benchmark's own load, not the engine's recovery.
const fleetSide = "fleet"

// stopStormProfile ends the storm's CPU profile, writes it when
// -fleet-cpuprofile asks for it and returns the probes' share in ms.
func stopStormProfile(split *measure.CPUSplit, engine string, brokers int) float64 {
	by, err := split.Stop()
	if err != nil {
		progress("   storm profile: %v", err)
		return 0
	}
	if cfg.fleetCPUProfile != "" {
		path := fmt.Sprintf("%s-%s-%d.pprof", cfg.fleetCPUProfile, engine, brokers)
		if err := os.WriteFile(path, split.Raw(), 0o644); err != nil {
			progress("   storm profile: %v", err)
		} else {
			progress("   storm profile in %s (go tool pprof -tagfocus %s=probe / -tagignore %s=probe)", path, fleetSide, fleetSide)
		}
	}
	return float64(by["probe"]) / 1e6
}

// fleetRun subscribes nb brokers of kind k to nc channels each, kills
// every Pub/Sub connection on every master and measures the recovery.
func fleetRun(ctx context.Context, k engines.Kind, servers, seeds []string, nb, nc int) (res fleetResult) {
	partition, err := fleetPartitioner(k.Name)
	if err != nil {
		res.Error = err.Error()
		return res
	}
	res.MaxClients = map[string]int{}
	if strings.HasPrefix(k.Name, "centrifuge") {
		// One subscribe connection per partition per broker, spread over the
		// masters by slot, plus rueidis command connections: 128+8 per broker
		// on one master is more than enough.
		need := nb*(128+8) + 100
		for _, s := range servers {
			if measure.IntField(s, "clients", "maxclients") < need {
				if _, err := launch.Command(s, "CONFIG", "SET", "maxclients", strconv.Itoa(need)); err != nil {
					res.Error = fmt.Sprintf("CONFIG SET maxclients %d on %s: %v", need, s, err)
					return res
				}
			}
		}
	}
	for _, s := range servers {
		res.MaxClients[s] = measure.IntField(s, "clients", "maxclients")
	}

	var t0 atomic.Int64
	var lastRestored atomic.Int64
	// round is the probe round under way: the warm-up before the kill,
	// then the storm's.
	var round atomic.Pointer[probeRound]
	prefix := fmt.Sprintf("fl:%s:", k.Name)
	names := make([][]string, nb)
	probes := make([]map[string]int, nb)
	for b := range nb {
		names[b] = channelNames(fmt.Sprintf("%s%d:", prefix, b), nc)
		probes[b] = map[string]int{}
		for j, ch := range probeChannels(names[b], partition) {
			probes[b][ch] = j
		}
		res.Probes += len(probes[b])
	}

	deadline := time.Now().Add(10 * time.Second)
	for shardChannels(servers) != 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	base := measure.Clients(servers)
	baseConns := map[string]int{}
	for _, s := range servers {
		baseConns[s], _ = clientCounts(s)
	}
	engs := make([]engines.Engine, nb)
	defer func() {
		for _, eng := range engs {
			if eng != nil {
				_ = eng.Close()
			}
		}
		deadline := time.Now().Add(20 * time.Second)
		for (measure.Clients(servers) > base || shardChannels(servers) > 0) && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
	}()
	for b := range nb {
		tu := tuning()
		tu.OnEvent = func(kind string, at time.Time) {
			if kind == "restored" && t0.Load() != 0 {
				for {
					cur := lastRestored.Load()
					if at.UnixNano() <= cur || lastRestored.CompareAndSwap(cur, at.UnixNano()) {
						break
					}
				}
			}
		}
		recv := func(ch string, _ []byte, sentAt time.Time) {
			if r := round.Load(); r != nil {
				if j, ok := probes[b][ch]; ok {
					r.deliver(b, j, sentAt)
				}
			}
		}
		eng, err := k.New(engines.Target{Cluster: seeds}, tu, recv)
		if err != nil {
			res.Error = err.Error()
			return res
		}
		engs[b] = eng
	}

	// Subscribe the fleet, a few brokers at a time.
	s0 := time.Now()
	var firstErr atomic.Value
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for b := range nb {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			defer cancel()
			if err := engs[b].Subscribe(sctx, names[b]); err != nil {
				firstErr.CompareAndSwap(nil, fmt.Sprintf("subscribe broker %d: %v", b, err))
			}
		}()
	}
	wg.Wait()
	if e, ok := firstErr.Load().(string); ok {
		res.Error = e
		return res
	}
	res.SubscribeSecs = time.Since(s0).Seconds()
	runtime.GC()
	var mem runtime.MemStats
	runtime.ReadMemStats(&mem)
	res.HeapBytes = mem.HeapAlloc
	want := shardChannels(servers)
	if want < nb*nc {
		res.Error = fmt.Sprintf("only %d of %d channels subscribed on the servers", want, nb*nc)
		return res
	}
	if strings.HasPrefix(k.Name, "centrifuge") {
		if err := centrifugePartitionsAgree(ctx, servers, prefix+"0:", keys(probes[0]), partition); err != nil {
			res.Error = err.Error()
			return res
		}
	}
	res.Conns, res.SubConns = map[string]int{}, map[string]int{}
	for _, s := range servers {
		all, sub := clientCounts(s)
		res.Conns[s], res.SubConns[s] = all-baseConns[s], sub
	}

	// Every probe delivers once before the kill: the fleet is proven
	// delivering, and each broker has run its delivery path as a server's
	// has by the time a storm hits it (its workers' memory touched, its
	// publish buffers grown), so the storm measures recovery, not first use.
	if err := warmUp(ctx, engs, probes, &round, time.Minute); err != nil {
		res.Error = err.Error()
		return res
	}

	cctx, stopCPU := context.WithCancel(ctx)
	peaks, cpuDone := sampleCPU(cctx, servers, fleetSample)
	defer func() { stopCPU(); <-cpuDone }()
	time.Sleep(2 * fleetSample) // a baseline sample before the kill
	calls0 := ssubCalls(servers)
	cpu0, rcpu0 := measure.ProcessCPU(), measure.RedisCPU(servers)
	master0 := map[string]time.Duration{}
	pids := map[string]int{}
	wait0 := map[string]time.Duration{}
	for _, s := range servers {
		master0[s] = measure.RedisCPU([]string{s})
		pids[s] = measure.IntField(s, "server", "process_id")
		_, wait0[s], _ = measure.Sched(pids[s])
	}
	_, selfWait0, _ := measure.Sched(os.Getpid())
	// The storm's own profile, split by the probe goroutines' label; a
	// whole-run profile (-cpuprofile) leaves no room for it.
	var split *measure.CPUSplit
	if cfg.cpuprofile == "" {
		split, _ = measure.StartCPUSplit(fleetSide)
	}
	subs := subscribers(servers)
	start := time.Now()
	storm := newProbeRound(probes, start)
	round.Store(storm)
	t0.Store(start.UnixNano())
	res.Killed, res.KillMethod = killPubSub(servers, subs)

	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sweeps := sweepProbes(pctx, engs, probes, storm)
	limit := time.Now().Add(fleetLimit)
	lastNote := time.Now()
	for res.ResubSecs == 0 || storm.remaining.Load() > 0 {
		if time.Since(lastNote) > 2*time.Second {
			progress("   … %d of %d channels subscribed again, %d of %d probes not delivered yet", shardChannels(servers), want, storm.remaining.Load(), res.Probes)
			lastNote = time.Now()
		}
		if time.Now().After(limit) || ctx.Err() != nil {
			res.Error = fmt.Sprintf("timeout: %d probes not delivered, subscribed %d/%d", storm.remaining.Load(), shardChannels(servers), want)
			break
		}
		if res.ResubSecs == 0 && shardChannels(servers) >= want {
			res.ResubSecs = time.Since(start).Seconds()
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	sweeps.wait()
	stopCPU()
	<-cpuDone
	cpu1, rcpu1 := measure.ProcessCPU(), measure.RedisCPU(servers)
	res.MasterCPUms, res.MasterWaitms = map[string]float64{}, map[string]float64{}
	for _, s := range servers {
		res.MasterCPUms[s] = float64(measure.RedisCPU([]string{s})-master0[s]) / 1e6
		if _, w, err := measure.Sched(pids[s]); err == nil {
			res.MasterWaitms[s] = float64(w-wait0[s]) / 1e6
		}
	}
	if _, w, err := measure.Sched(os.Getpid()); err == nil {
		res.ClientWaitms = float64(w-selfWait0) / 1e6
	}
	if split != nil {
		res.ProbeCPUms = stopStormProfile(split, k.Name, nb)
	}
	res.ProbePublishes = sweeps.published.Load()
	res.LongestSweepms = float64(sweeps.longest.Load()) / 1e6
	res.ClientCPUms = float64(cpu1-cpu0) / 1e6
	res.RedisCPUms = float64(rcpu1-rcpu0) / 1e6
	calls1 := ssubCalls(servers)
	res.SsubPerMaster, res.SubConnsAfter = map[string]int{}, map[string]int{}
	for _, s := range servers {
		res.SsubPerMaster[s] = calls1[s] - calls0[s]
		_, res.SubConnsAfter[s] = clientCounts(s)
	}
	if p := storm.last.Load(); p > 0 {
		res.DeliverSecs = time.Duration(p - start.UnixNano()).Seconds()
	}
	if r := lastRestored.Load(); r > start.UnixNano() {
		res.RestoredSecs = time.Duration(r - start.UnixNano()).Seconds()
	}
	res.RecoverSecs = max(res.ResubSecs, res.DeliverSecs)
	res.PeakCPU, res.PeakCPUSum = peaks.Peak, peaks.PeakSum
	return res
}

func keys(m map[string]int) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
