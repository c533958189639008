package main

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/shardcast/shardcast/bench/internal/engines"
)

type memResult struct {
	Scenario      string  `json:"scenario"`
	Engine        string  `json:"engine"`
	Channels      int     `json:"channels"`
	Batch         int     `json:"batch"`
	NameBytes     int     `json:"name_bytes_total"`
	HeapBytes     int64   `json:"heap_bytes_delta"`
	PerChannel    float64 `json:"heap_bytes_per_channel_beyond_name"`
	SubscribeSecs float64 `json:"subscribe_secs"`
	Error         string  `json:"error,omitempty"`
}

// runMemory subscribes many channels on one standalone Redis and measures
// the broker's heap per channel and the time to subscribe them all.
func runMemory(ctx context.Context, e *env) (section, error) {
	sec := section{Name: "memory", Title: fmt.Sprintf("Memory: %d subscribed channels on one standalone Redis", cfg.memChannels)}
	addr, stop, err := e.FreshStandalone()
	if err != nil {
		return sec, err
	}
	defer stop()
	var rows [][]string
	var sc *memResult
	for _, name := range engineList([]string{"shardcast", "centrifuge", "go-redis"}) {
		k, err := engines.Lookup(name)
		if err != nil {
			return sec, err
		}
		if k.Cluster {
			continue
		}
		progress("memory: %s, %d channels in calls of %d …", name, cfg.memChannels, cfg.memBatch)
		r := memRun(ctx, k, addr)
		r.Scenario, r.Engine, r.Channels, r.Batch = "memory", name, cfg.memChannels, cfg.memBatch
		emit(r)
		if r.Error != "" {
			progress("   error: %s", r.Error)
			rows = append(rows, []string{name, "error: " + r.Error})
			continue
		}
		progress("   %.1f B/channel beyond the name, subscribed in %.2fs", r.PerChannel, r.SubscribeSecs)
		rows = append(rows, []string{name, fmt.Sprintf("%.1f", r.PerChannel), fmt.Sprintf("%.1f MiB", float64(r.HeapBytes)/(1<<20)),
			fmt.Sprintf("%.2fs", r.SubscribeSecs), fmtRate(float64(r.Channels) / r.SubscribeSecs)})
		if name == "shardcast" {
			rr := r
			sc = &rr
		}
		if ctx.Err() != nil {
			return sec, ctx.Err()
		}
	}
	tbl := table([]string{"engine", "heap B/channel beyond the name", "heap delta", "time to subscribe all", "channels/s"}, rows)
	show("memory\n" + tbl)
	sec.Body = fmt.Sprintf("A fresh standalone Redis; one engine at a time in this process subscribes %d channels (names `m:<i>`, all in one "+
		"backing string, so they cost exactly their bytes) in Subscribe calls of %d. The names exist before the broker is created; the heap is read "+
		"with runtime.ReadMemStats (HeapAlloc) after two runtime.GC() calls, once after the broker is created and once after every channel is "+
		"subscribed. Since the name bytes are allocated before both readings, the difference divided by the channel count is the broker's heap "+
		"per channel beyond the name (a broker that copies names pays for its copies here).\n\n%s\n", cfg.memChannels, cfg.memBatch, tbl)
	if sc != nil {
		sec.Targets = append(sec.Targets,
			target{"memory: ≤ 100 bytes of broker heap per subscribed channel beyond the name", fmt.Sprintf("%.1f B/channel", sc.PerChannel), metStr(sc.PerChannel <= 100)},
			target{fmt.Sprintf("memory: %d channels subscribed in < 10 s on one standalone Redis", cfg.memChannels), fmt.Sprintf("%.2fs", sc.SubscribeSecs), metStr(sc.SubscribeSecs < 10)})
		if cfg.memChannels != 1000000 {
			sec.Targets[len(sec.Targets)-1].Met += " (run with fewer channels than the target's 1,000,000)"
		}
	}
	return sec, nil
}

func heapNow() int64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

func memRun(ctx context.Context, k engines.Kind, addr string) (res memResult) {
	n := cfg.memChannels
	var b strings.Builder
	ends := make([]int, n)
	for i := range n {
		b.WriteString("m:")
		b.WriteString(strconv.Itoa(i))
		ends[i] = b.Len()
	}
	all := b.String()
	names := make([]string, n)
	prev := 0
	for i, end := range ends {
		names[i] = all[prev:end]
		prev = end
	}
	ends = nil
	res.NameBytes = len(all)

	eng, err := k.New(engines.Target{Standalone: []string{addr}}, tuning(), func(string, []byte, time.Time) {})
	if err != nil {
		res.Error = err.Error()
		return res
	}
	defer func() { _ = eng.Close() }()
	h0 := heapNow()
	start := time.Now()
	lastNote := start
	for i := 0; i < n; i += cfg.memBatch {
		if time.Since(lastNote) > 2*time.Second {
			progress("   … %d of %d channels subscribed", i, n)
			lastNote = time.Now()
		}
		sctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		err := eng.Subscribe(sctx, names[i:min(i+cfg.memBatch, n)])
		cancel()
		if err != nil {
			res.Error = "subscribe: " + err.Error()
			return res
		}
	}
	res.SubscribeSecs = time.Since(start).Seconds()
	h1 := heapNow()
	runtime.KeepAlive(names)
	res.HeapBytes = h1 - h0
	res.PerChannel = float64(res.HeapBytes) / float64(n)
	return res
}
