package main

import (
	"context"
	"fmt"
	"math/bits"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/bench/internal/engines"
	"github.com/shardcast/shardcast/bench/internal/launch"
	"github.com/shardcast/shardcast/bench/internal/measure"
)

type resubResult struct {
	Scenario       string         `json:"scenario"`
	Engine         string         `json:"engine"`
	Channels       int            `json:"channels"`
	SubscribeSecs  float64        `json:"initial_subscribe_secs"`
	Killed         int            `json:"killed_connections"`
	KillMethod     string         `json:"kill_method"`
	SubConns       int            `json:"subscribe_connections_before"`
	SsubPerMaster  map[string]int `json:"ssubscribe_calls_per_master"`
	PartsPerMaster map[string]int `json:"shardcast_partitions_per_master,omitempty"`
	ResubSecs      float64        `json:"all_subscribed_secs"`
	RestoredSecs   float64        `json:"last_restored_event_secs,omitempty"`
	DeliverSecs    float64        `json:"all_delivering_secs"`
	ClientCPUms    float64        `json:"client_cpu_ms"`
	RedisCPUms     float64        `json:"redis_cpu_ms"`
	Error          string         `json:"error,omitempty"`
}

// runResubscribe kills every Pub/Sub connection on every master of a
// 3-master cluster while an engine holds many channels, then measures how
// it resubscribes.
func runResubscribe(ctx context.Context, e *env) (section, error) {
	sec := section{Name: "resubscribe", Title: "Resubscribe after CLIENT KILL TYPE pubsub"}
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
	layout, err := shardcast.NewLayout(128, "")
	if err != nil {
		return sec, err
	}
	parts := map[string]int{}
	for p := range 128 {
		parts[ownerOf(sm, int(layout.Slot(p)))]++
	}
	var results []resubResult
	for _, name := range engineList([]string{"shardcast-cluster", "centrifuge-sharded", "centrifuge-sharded-tags", "go-redis-cluster"}) {
		k, err := engines.Lookup(name)
		if err != nil {
			return sec, err
		}
		if !k.Cluster {
			continue
		}
		batches := []int{0}
		per := (cfg.resubChannels + 127) / 128
		if name == "shardcast-cluster" && cfg.scBatch == 0 && per > shardcast.DefaultSubscribeBatch {
			// Also show what one command per partition costs.
			batches = append(batches, 1<<bits.Len(uint(per)))
		}
		for _, batch := range batches {
			label := name
			if batch > 0 {
				label = fmt.Sprintf("%s (SubscribeBatch %d)", name, batch)
			}
			progress("resubscribe: %s, %d channels …", label, cfg.resubChannels)
			r := resubRun(ctx, k, seeds, servers, batch)
			r.Scenario, r.Engine, r.Channels = "resubscribe", label, cfg.resubChannels
			if name == "shardcast-cluster" {
				r.PartsPerMaster = parts
			}
			emit(r)
			if r.Error != "" {
				progress("   error: %s", r.Error)
			} else {
				progress("   subscribed again in %.3fs, delivering in %.3fs, ssubscribe calls %v", r.ResubSecs, r.DeliverSecs, r.SsubPerMaster)
			}
			results = append(results, r)
			if ctx.Err() != nil {
				return sec, ctx.Err()
			}
		}
	}
	var rows [][]string
	for _, r := range results {
		if r.Error != "" {
			rows = append(rows, []string{r.Engine, "error: " + r.Error})
			continue
		}
		var calls []string
		total := 0
		for _, m := range servers {
			calls = append(calls, strconv.Itoa(r.SsubPerMaster[m]))
			total += r.SsubPerMaster[m]
		}
		restored := "–"
		if r.RestoredSecs > 0 {
			restored = fmt.Sprintf("%.3fs", r.RestoredSecs)
		}
		rows = append(rows, []string{r.Engine, fmt.Sprintf("%.2fs", r.SubscribeSecs), strconv.Itoa(r.Killed),
			strings.Join(calls, " / "), fmt.Sprintf("%.1f", float64(total)/128), fmt.Sprintf("%.3fs", r.ResubSecs), restored,
			fmt.Sprintf("%.3fs", r.DeliverSecs), fmt.Sprintf("%.0fms", r.ClientCPUms), fmt.Sprintf("%.0fms", r.RedisCPUms)})
	}
	head := []string{"engine", "initial subscribe", "conns killed", "SSUBSCRIBE calls per master", "calls / partition", "all subscribed again", "last EventRestored", "all delivering again", "client CPU", "Redis CPU"}
	tbl := table(head, rows)
	show("resubscribe\n" + tbl)
	var pp []string
	for _, m := range servers {
		pp = append(pp, strconv.Itoa(parts[m]))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "A fresh 3-master cluster (no replicas); one engine at a time subscribes %d channels (in Subscribe calls of 10,000), "+
		"then `CLIENT KILL TYPE pubsub` runs on every master at t=0. *SSUBSCRIBE calls per master* is the rise of `cmdstat_ssubscribe` "+
		"(INFO commandstats) from just before the kill until every channel delivers again, in master order %s; shardcast's 128 partitions "+
		"are owned %s by those masters. *All subscribed again* is when the sum of `pubsubshard_channels` (INFO stats, polled every 2 ms) over the masters "+
		"is back to its value before the kill — the same measure for every engine (Centrifuge also holds one service channel per partition, "+
		"counted in both readings). *All delivering again*: from t=0, goroutines keep publishing one message to every channel that has not yet "+
		"delivered a message published after t=0, sweep after sweep, until every channel has; its resolution is one sweep. CPU covers t=0 to then.\n\n",
		cfg.resubChannels, strings.Join(servers, ", "), strings.Join(pp, " / "))
	b.WriteString(tbl)
	b.WriteString("\n")
	var sc, scBig, best resubResult
	for _, r := range results {
		if r.Error != "" {
			continue
		}
		if strings.HasPrefix(r.Engine, "shardcast-cluster (") {
			scBig = r
		} else if r.Engine == "shardcast-cluster" {
			sc = r
		} else if strings.HasPrefix(r.Engine, "centrifuge") && (best.Engine == "" || r.ResubSecs < best.ResubSecs) {
			best = r
		}
	}
	if sc.Engine != "" {
		ok := true
		var got []string
		for _, m := range servers {
			got = append(got, fmt.Sprintf("%d/%d", sc.SsubPerMaster[m], parts[m]))
			if sc.SsubPerMaster[m] != parts[m] {
				ok = false
			}
		}
		per := float64(cfg.resubChannels) / 128
		note := ""
		if per > float64(shardcast.DefaultSubscribeBatch) {
			note = fmt.Sprintf(" (%.0f channels per partition > SubscribeBatch %d, so ≥2 commands per partition)", per, shardcast.DefaultSubscribeBatch)
		}
		if scBig.Engine != "" {
			var big []string
			for _, m := range servers {
				big = append(big, fmt.Sprintf("%d/%d", scBig.SsubPerMaster[m], parts[m]))
			}
			note += "; with " + strings.TrimSuffix(strings.TrimPrefix(scBig.Engine, "shardcast-cluster ("), ")") + ": " + strings.Join(big, ", ")
		}
		sec.Targets = append(sec.Targets, target{"resubscribe of 100,000 channels: SSUBSCRIBE calls per master = partitions it owns",
			"calls/partitions per master " + strings.Join(got, ", ") + note, metStr(ok)})
		if best.Engine != "" && sc.ResubSecs > 0 {
			r := sc.ResubSecs / best.ResubSecs
			sec.Targets = append(sec.Targets, target{"resubscribe: every channel subscribed again in ≤ 1/5 of Centrifuge's time",
				fmt.Sprintf("%.2f× (%.3fs vs %s %.3fs)", r, sc.ResubSecs, best.Engine, best.ResubSecs), metStr(r <= 0.2)})
		}
	}
	sec.Body = b.String()
	return sec, nil
}

func shardChannels(servers []string) int {
	n := 0
	for _, s := range servers {
		n += measure.IntField(s, "stats", "pubsubshard_channels")
	}
	return n
}

func ssubCalls(servers []string) map[string]int {
	out := map[string]int{}
	for _, s := range servers {
		out[s] = measure.CommandCalls(s, "ssubscribe")
	}
	return out
}

// subscribers lists, per server, the IDs of the connections holding a
// subscription: what killPubSub is to end. Taken before the storm's
// clock starts, so that the CLIENT LIST it costs is not counted in it.
func subscribers(servers []string) map[string][]string {
	ids := map[string][]string{}
	for _, s := range servers {
		ids[s] = subscribedIDs(s)
	}
	return ids
}

// killPubSub runs CLIENT KILL TYPE pubsub on every server. Where it
// killed fewer connections than before listed (RESP3 subscribers are not
// of type pubsub on every Redis version), those it left are then killed
// by ID. New connections (reconnects) have new IDs and are left alone.
func killPubSub(servers []string, before map[string][]string) (int, string) {
	killed := 0
	method := "CLIENT KILL TYPE pubsub"
	for _, s := range servers {
		out, err := launch.Command(s, "CLIENT", "KILL", "TYPE", "pubsub")
		n, _ := strconv.Atoi(out)
		killed += n
		if err == nil && n >= len(before[s]) {
			continue
		}
		for _, id := range before[s] {
			if out, err := launch.Command(s, "CLIENT", "KILL", "ID", id); err == nil && out != "0" {
				killed++
				method = "CLIENT KILL TYPE pubsub, then CLIENT KILL ID for subscribers it left"
			}
		}
	}
	return killed, method
}

// subscribedIDs lists the IDs of connections holding any subscription.
func subscribedIDs(addr string) []string {
	list, err := launch.Command(addr, "CLIENT", "LIST")
	if err != nil {
		return nil
	}
	var ids []string
	for _, line := range strings.Split(list, "\n") {
		f := map[string]string{}
		for _, kv := range strings.Fields(line) {
			if k, v, ok := strings.Cut(kv, "="); ok {
				f[k] = v
			}
		}
		if (f["sub"] != "" && f["sub"] != "0") || (f["ssub"] != "" && f["ssub"] != "0") {
			ids = append(ids, f["id"])
		}
	}
	return ids
}

func resubRun(ctx context.Context, k engines.Kind, seeds, servers []string, batch int) (res resubResult) {
	n := cfg.resubChannels
	delivered := make([]atomic.Bool, n)
	var remaining atomic.Int64
	remaining.Store(int64(n))
	var t0 atomic.Int64
	prefix := fmt.Sprintf("rs:%s:%d:", k.Name, batch)
	recv := func(ch string, _ []byte, sentAt time.Time) {
		start := t0.Load()
		if start == 0 || sentAt.UnixNano() < start {
			return
		}
		i, err := strconv.Atoi(ch[strings.LastIndexByte(ch, ':')+1:])
		if err != nil || i < 0 || i >= n {
			return
		}
		if !delivered[i].Swap(true) {
			remaining.Add(-1)
		}
	}
	var lastRestored atomic.Int64
	tu := tuning()
	if batch > 0 {
		tu.SubscribeBatch = batch
	}
	tu.OnEvent = func(kind string, at time.Time) {
		if kind == "restored" {
			lastRestored.Store(at.UnixNano())
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for shardChannels(servers) != 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	base := measure.Clients(servers)
	eng, err := k.New(engines.Target{Cluster: seeds}, tu, recv)
	if err != nil {
		res.Error = err.Error()
		return res
	}
	defer closeAndSettle(eng, servers, base)
	names := channelNames(prefix, n)
	s0 := time.Now()
	for i := 0; i < n; i += 10000 {
		if i > 0 && i%50000 == 0 {
			progress("   … %d of %d channels subscribed", i, n)
		}
		sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		err := eng.Subscribe(sctx, names[i:min(i+10000, n)])
		cancel()
		if err != nil {
			res.Error = "subscribe: " + err.Error()
			return res
		}
	}
	res.SubscribeSecs = time.Since(s0).Seconds()
	want := shardChannels(servers)
	if want < n {
		res.Error = fmt.Sprintf("only %d of %d channels subscribed on the servers", want, n)
		return res
	}
	subs := subscribers(servers)
	for _, s := range servers {
		res.SubConns += len(subs[s])
	}
	calls0 := ssubCalls(servers)
	cpu0, rcpu0 := measure.ProcessCPU(), measure.RedisCPU(servers)
	start := time.Now()
	t0.Store(start.UnixNano())
	res.Killed, res.KillMethod = killPubSub(servers, subs)

	// Publish sweeps over the channels that have not delivered yet.
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		payload := make([]byte, 64)
		for pctx.Err() == nil && remaining.Load() > 0 {
			var todo []int
			for i := range delivered {
				if !delivered[i].Load() {
					todo = append(todo, i)
				}
			}
			var pw sync.WaitGroup
			const workers = 32
			for w := range workers {
				pw.Add(1)
				go func() {
					defer pw.Done()
					buf := append([]byte(nil), payload...)
					for j := w; j < len(todo) && pctx.Err() == nil; j += workers {
						engines.Stamp(buf, time.Now())
						_ = eng.Publish(pctx, names[todo[j]], buf)
					}
				}()
			}
			pw.Wait()
			sleepCtx(pctx, 20*time.Millisecond)
		}
	}()
	limit := time.Now().Add(2 * time.Minute)
	lastNote := time.Now()
	for res.ResubSecs == 0 || remaining.Load() > 0 {
		if time.Since(lastNote) > 2*time.Second {
			progress("   … %d of %d channels subscribed again, %d not delivering yet", shardChannels(servers), want, remaining.Load())
			lastNote = time.Now()
		}
		if time.Now().After(limit) || ctx.Err() != nil {
			res.Error = fmt.Sprintf("timeout: %d channels not delivering, subscribed %d/%d", remaining.Load(), shardChannels(servers), want)
			break
		}
		if res.ResubSecs == 0 && shardChannels(servers) >= want {
			res.ResubSecs = time.Since(start).Seconds()
		}
		if remaining.Load() == 0 && res.DeliverSecs == 0 {
			res.DeliverSecs = time.Since(start).Seconds()
		}
		time.Sleep(2 * time.Millisecond)
	}
	if res.DeliverSecs == 0 && res.Error == "" {
		res.DeliverSecs = time.Since(start).Seconds()
	}
	cancel()
	wg.Wait()
	cpu1, rcpu1 := measure.ProcessCPU(), measure.RedisCPU(servers)
	res.ClientCPUms = float64(cpu1-cpu0) / 1e6
	res.RedisCPUms = float64(rcpu1-rcpu0) / 1e6
	calls1 := ssubCalls(servers)
	res.SsubPerMaster = map[string]int{}
	for _, s := range servers {
		res.SsubPerMaster[s] = calls1[s] - calls0[s]
	}
	if r := lastRestored.Load(); r > start.UnixNano() {
		res.RestoredSecs = time.Duration(r - start.UnixNano()).Seconds()
	}
	return res
}
