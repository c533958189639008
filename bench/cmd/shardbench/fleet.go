package main

import (
	"context"
	"fmt"
	"slices"
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
	Scenario      string             `json:"scenario"`
	Engine        string             `json:"engine"`
	Brokers       int                `json:"brokers"`
	Channels      int                `json:"channels_per_broker"`
	SubscribeSecs float64            `json:"initial_subscribe_secs"`
	MaxClients    map[string]int     `json:"maxclients_per_master"`
	Conns         map[string]int     `json:"connections_per_master"`
	SubConns      map[string]int     `json:"subscribe_connections_per_master_before"`
	SubConnsAfter map[string]int     `json:"subscribe_connections_per_master_after"`
	Killed        int                `json:"killed_connections"`
	KillMethod    string             `json:"kill_method"`
	SsubPerMaster map[string]int     `json:"ssubscribe_calls_per_master"`
	Probes        int                `json:"probe_channels"`
	ResubSecs     float64            `json:"all_subscribed_secs"`
	RestoredSecs  float64            `json:"last_restored_event_secs,omitempty"`
	DeliverSecs   float64            `json:"last_probe_delivered_secs"`
	RecoverSecs   float64            `json:"recovered_secs"`
	PeakCPU       map[string]float64 `json:"peak_redis_cpu_pct_per_master"`
	PeakCPUSum    float64            `json:"peak_redis_cpu_pct_sum"`
	RedisCPUms    float64            `json:"redis_cpu_ms"`
	ClientCPUms   float64            `json:"client_cpu_ms"`
	Error         string             `json:"error,omitempty"`
}

// fleetSample is how often the scenario reads INFO cpu of every master.
const fleetSample = 50 * time.Millisecond

// fleetSweep is the pause between two probe sweeps of one broker.
const fleetSweep = 20 * time.Millisecond

// runFleet holds -fleet-brokers brokers of one engine in one process, as
// a fleet of server nodes would, each with -fleet-channels channels of
// its own, kills every Pub/Sub connection on every master of a 3-master
// cluster and measures how the whole fleet recovers.
func runFleet(ctx context.Context, e *env) (section, error) {
	sec := section{Name: "fleet", Title: fmt.Sprintf("Fleet reconnect storm (%d brokers)", cfg.fleetBrokers)}
	seeds, stop, err := e.FreshCluster(ctx, 3)
	if err != nil {
		return sec, err
	}
	defer stop()
	sm, err := slotMap(ctx, seeds)
	if err != nil {
		return sec, err
	}
	servers := masters(sm)
	var results []fleetResult
	for _, run := range fleetRuns(engineList([]string{"shardcast-cluster", "centrifuge-sharded"})) {
		name, nb := run.engine, run.brokers
		k, err := engines.Lookup(name)
		if err != nil {
			return sec, err
		}
		if !k.Cluster {
			continue
		}
		progress("fleet: %s, %d brokers × %d channels …", name, nb, cfg.fleetChannels)
		r := fleetRun(ctx, k, servers, seeds, nb)
		r.Scenario, r.Engine, r.Brokers, r.Channels = "fleet", name, nb, cfg.fleetChannels
		emit(r)
		if r.Error != "" {
			progress("   error: %s", r.Error)
		} else {
			progress("   subscribed again in %.3fs, last probe in %.3fs, ssubscribe calls %v, peak Redis CPU %v", r.ResubSecs, r.DeliverSecs, r.SsubPerMaster, r.PeakCPU)
		}
		results = append(results, r)
		if ctx.Err() != nil {
			return sec, ctx.Err()
		}
	}
	perMaster := func(m map[string]int) string {
		var out []string
		for _, s := range servers {
			out = append(out, strconv.Itoa(m[s]))
		}
		return strings.Join(out, " / ")
	}
	var rows [][]string
	for _, r := range results {
		if r.Error != "" {
			rows = append(rows, []string{r.Engine, strconv.Itoa(r.Brokers), "error: " + r.Error})
			continue
		}
		var cpu []string
		for _, s := range servers {
			cpu = append(cpu, fmt.Sprintf("%.0f%%", r.PeakCPU[s]))
		}
		restored := "–"
		if r.RestoredSecs > 0 {
			restored = fmt.Sprintf("%.3fs", r.RestoredSecs)
		}
		rows = append(rows, []string{r.Engine, strconv.Itoa(r.Brokers), fmt.Sprintf("%.2fs", r.SubscribeSecs), perMaster(r.SubConns), perMaster(r.SubConnsAfter),
			perMaster(r.Conns), strconv.Itoa(r.Killed), perMaster(r.SsubPerMaster), fmt.Sprintf("%.3fs", r.ResubSecs), restored,
			fmt.Sprintf("%.3fs", r.DeliverSecs), fmt.Sprintf("**%.3fs**", r.RecoverSecs), strings.Join(cpu, " / "),
			fmt.Sprintf("%.0f%%", r.PeakCPUSum), fmt.Sprintf("%.0fms", r.RedisCPUms), fmt.Sprintf("%.0fms", r.ClientCPUms)})
	}
	head := []string{"engine", "brokers", "initial subscribe", "subscribe conns per master before", "… after recovery", "all conns per master",
		"conns killed", "SSUBSCRIBE calls per master", "all subscribed again", "last EventRestored", "last probe delivered", "recovered",
		"peak Redis CPU per master", "peak Redis CPU, sum", "Redis CPU", "client CPU"}
	tbl := table(head, rows)
	show("fleet\n" + tbl)
	maxc := "?"
	if len(results) > 0 {
		maxc = perMaster(results[len(results)-1].MaxClients)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "A fresh 3-master cluster (no replicas). %d brokers of one engine run in the benchmark process, each with its own connections "+
		"as %d server nodes would have, each subscribed to %d channels of its own (%d in all; 128 partitions per broker), then "+
		"`CLIENT KILL TYPE pubsub` runs on every master at t=0. Per-master figures are in master order %s. *Subscribe conns* are CLIENT LIST "+
		"entries holding a subscription, just before the kill and once the fleet has recovered; *all conns* are every connection the brokers opened. "+
		"*SSUBSCRIBE calls* is the rise of `cmdstat_ssubscribe` (INFO commandstats) from the kill until recovery. *All subscribed again* is when "+
		"the sum of `pubsubshard_channels` over the masters is back to its value before the kill. *Last probe delivered*: every broker has one probe "+
		"channel in each of its partitions (the engine's own channel→partition mapping; %d brokers × up to 128); from t=0 one goroutine per broker "+
		"publishes, every %s, one message to each of its probes that has not yet delivered a message published after t=0; the column is when the "+
		"last probe arrived. *Recovered* is the later of the two: every channel subscribed on Redis and every partition of every broker delivering. "+
		"*Peak Redis CPU* is the highest rate of `used_cpu_sys+used_cpu_user` (INFO cpu) over %s samples, in %% of one core, per master and summed; "+
		"it includes the probes' publishes. Both CPU totals cover t=0 to recovery. maxclients per master: %s (Redis 7.0's default unless "+
		"Centrifuge's brokers need more: one subscribe connection per partition, %d × 128 over the three masters, plus command connections; "+
		"the scenario raises it with CONFIG SET when they would not fit).\n\n",
		cfg.fleetBrokers, cfg.fleetBrokers, cfg.fleetChannels, cfg.fleetBrokers*cfg.fleetChannels, strings.Join(servers, ", "),
		cfg.fleetBrokers, fleetSweep, fleetSample, maxc, cfg.fleetCentBrokers)
	if slices.ContainsFunc(results, func(r fleetResult) bool { return strings.HasPrefix(r.Engine, "centrifuge") }) && cfg.fleetCentBrokers != cfg.fleetBrokers {
		fmt.Fprintf(&b, "Centrifuge runs %d brokers, not %d (`-fleet-cent-brokers`): each of its brokers holds 128 subscribe connections, and rueidis gives "+
			"every connection 0.5 MiB of read and 0.5 MiB of write buffer (Centrifuge does not expose these options), so %d of its brokers in one process "+
			"need gigabytes of buffers before subscribing anything, more than this shared machine can give. The shardcast row at %d brokers is the "+
			"like-for-like comparison.\n\n", cfg.fleetCentBrokers, cfg.fleetBrokers, cfg.fleetBrokers, cfg.fleetCentBrokers)
	}
	b.WriteString(tbl)
	b.WriteString("\n")
	for _, r := range results {
		if r.Engine != "shardcast-cluster" || r.Brokers != cfg.fleetBrokers || r.Error != "" {
			continue
		}
		ok := true
		for _, s := range servers {
			if r.SubConns[s] != cfg.fleetBrokers || r.SubConnsAfter[s] != cfg.fleetBrokers {
				ok = false
			}
		}
		sec.Targets = append(sec.Targets,
			target{fmt.Sprintf("fleet: every channel of all %d brokers delivering again within 2 s of CLIENT KILL TYPE pubsub", cfg.fleetBrokers),
				fmt.Sprintf("%.3fs (%d × %d channels)", r.RecoverSecs, cfg.fleetBrokers, cfg.fleetChannels), metStr(r.RecoverSecs <= 2)},
			target{"fleet: 1 subscribe connection per master per broker, before and after the storm",
				fmt.Sprintf("%s before, %s after, for %d brokers", perMaster(r.SubConns), perMaster(r.SubConnsAfter), cfg.fleetBrokers), metStr(ok)})
	}
	sec.Body = b.String()
	return sec, nil
}

// fleetRuns lists the runs: every engine with -fleet-brokers, except
// Centrifuge, which gets -fleet-cent-brokers (it holds 128 subscribe
// connections per broker, each with rueidis's 1 MiB of buffers), and
// then shardcast once more at Centrifuge's size for a like-for-like row.
func fleetRuns(names []string) []struct {
	engine  string
	brokers int
} {
	type run = struct {
		engine  string
		brokers int
	}
	var out, extra []run
	for _, n := range names {
		switch {
		case strings.HasPrefix(n, "centrifuge"):
			out = append(out, run{n, cfg.fleetCentBrokers})
		case cfg.fleetCentBrokers != cfg.fleetBrokers && slices.ContainsFunc(names, func(s string) bool { return strings.HasPrefix(s, "centrifuge") }):
			out = append(out, run{n, cfg.fleetBrokers})
			extra = append(extra, run{n, cfg.fleetCentBrokers})
		default:
			out = append(out, run{n, cfg.fleetBrokers})
		}
	}
	// The like-for-like rows go just before the first Centrifuge run.
	for i, r := range out {
		if strings.HasPrefix(r.engine, "centrifuge") {
			return slices.Concat(out[:i:i], extra, out[i:])
		}
	}
	return append(out, extra...)
}

func fleetRun(ctx context.Context, k engines.Kind, servers, seeds []string, nb int) (res fleetResult) {
	nc := cfg.fleetChannels
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
	var remaining atomic.Int64
	var lastProbe atomic.Int64
	var lastRestored atomic.Int64
	prefix := fmt.Sprintf("fl:%s:", k.Name)
	names := make([][]string, nb)
	probes := make([]map[string]int, nb)
	delivered := make([][]atomic.Bool, nb)
	for b := range nb {
		names[b] = channelNames(fmt.Sprintf("%s%d:", prefix, b), nc)
		probes[b] = map[string]int{}
		for j, ch := range probeChannels(names[b], partition) {
			probes[b][ch] = j
		}
		delivered[b] = make([]atomic.Bool, len(probes[b]))
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
			start := t0.Load()
			if start == 0 || sentAt.UnixNano() < start {
				return
			}
			j, ok := probes[b][ch]
			if ok && !delivered[b][j].Swap(true) && remaining.Add(-1) == 0 {
				lastProbe.Store(time.Now().UnixNano())
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

	cctx, stopCPU := context.WithCancel(ctx)
	peaks, cpuDone := sampleCPU(cctx, servers, fleetSample)
	defer func() { stopCPU(); <-cpuDone }()
	time.Sleep(2 * fleetSample) // a baseline sample before the kill
	calls0 := ssubCalls(servers)
	cpu0, rcpu0 := measure.ProcessCPU(), measure.RedisCPU(servers)
	remaining.Store(int64(res.Probes))
	start := time.Now()
	t0.Store(start.UnixNano())
	res.Killed, res.KillMethod = killPubSub(servers)

	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var pw sync.WaitGroup
	for b := range nb {
		pw.Add(1)
		go func() {
			defer pw.Done()
			buf := make([]byte, 64)
			for pctx.Err() == nil {
				sent := 0
				for ch, j := range probes[b] {
					if pctx.Err() != nil || delivered[b][j].Load() {
						continue
					}
					engines.Stamp(buf, time.Now())
					_ = engs[b].Publish(pctx, ch, buf)
					sent++
				}
				if sent == 0 {
					return
				}
				sleepCtx(pctx, fleetSweep)
			}
		}()
	}
	limit := time.Now().Add(2 * time.Minute)
	lastNote := time.Now()
	for res.ResubSecs == 0 || remaining.Load() > 0 {
		if time.Since(lastNote) > 2*time.Second {
			progress("   … %d of %d channels subscribed again, %d of %d probes not delivered yet", shardChannels(servers), want, remaining.Load(), res.Probes)
			lastNote = time.Now()
		}
		if time.Now().After(limit) || ctx.Err() != nil {
			res.Error = fmt.Sprintf("timeout: %d probes not delivered, subscribed %d/%d", remaining.Load(), shardChannels(servers), want)
			break
		}
		if res.ResubSecs == 0 && shardChannels(servers) >= want {
			res.ResubSecs = time.Since(start).Seconds()
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	pw.Wait()
	stopCPU()
	<-cpuDone
	cpu1, rcpu1 := measure.ProcessCPU(), measure.RedisCPU(servers)
	res.ClientCPUms = float64(cpu1-cpu0) / 1e6
	res.RedisCPUms = float64(rcpu1-rcpu0) / 1e6
	calls1 := ssubCalls(servers)
	res.SsubPerMaster, res.SubConnsAfter = map[string]int{}, map[string]int{}
	for _, s := range servers {
		res.SsubPerMaster[s] = calls1[s] - calls0[s]
		_, res.SubConnsAfter[s] = clientCounts(s)
	}
	if p := lastProbe.Load(); p > 0 {
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
