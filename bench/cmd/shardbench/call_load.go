package main

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardcast/shardcast/bench/internal/measure"
)

// callLoad is the closed-loop calls of one presence or map run:
// workers goroutines, goroutine g making calls g, g+workers,
// g+2·workers, … of the scenario's workload.
type callLoad struct {
	workers int
	// call makes call i from goroutine g; short reports an answer the
	// scenario counts as short.
	call func(g, i int) (short bool, err error)
	// probe, if set, is read at the window's edges, as the CPU is: a
	// count of something the calls cause (the map's live updates).
	probe func() uint64
}

// callMeasure is what measure returns: the run's callResult, and what a
// scenario derives more from.
type callMeasure struct {
	callResult
	Seconds float64
	// Calls counts every call that returned without error, in the
	// window or not.
	Calls uint64
	// Probed is how much probe grew over the window.
	Probed uint64
}

// measure runs l's calls for cfg.warmup unmeasured and cfg.duration
// measured, and measures them on servers: the calls started in the
// window, their latency, the process's and the servers' CPU and the
// process's allocations per call, and the connections on each server
// at the window's end beyond base. Calls that fail are counted, the
// first error kept as Note (and as Error if no call succeeded in the
// window).
func (l callLoad) measure(ctx context.Context, servers []string, base map[string]connKinds) (res callMeasure) {
	var win window
	var hist measure.Histogram
	counts := make([]pubCount, l.workers)
	var failed, short atomic.Uint64
	var firstErr atomic.Value
	var stop atomic.Bool
	var wg sync.WaitGroup
	t0, t1 := win.plan(cfg.warmup, cfg.duration)
	for g := range l.workers {
		wg.Go(func() {
			for i := g; !stop.Load() && ctx.Err() == nil; i += l.workers {
				start := time.Now()
				sh, err := l.call(g, i)
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
	probe := l.probe
	if probe == nil {
		probe = func() uint64 { return 0 }
	}
	sleepCtx(ctx, time.Until(t0))
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	cpu0, rcpu0, rt0, probe0 := measure.ProcessCPU(), measure.RedisCPU(servers), measure.ReadRuntime(), probe()
	sleepCtx(ctx, time.Until(t1))
	cpu1, rcpu1, rt1, probe1 := measure.ProcessCPU(), measure.RedisCPU(servers), measure.ReadRuntime(), probe()
	runtime.ReadMemStats(&ms1)
	conns := masterConns(servers)
	stop.Store(true)
	wg.Wait()

	res.Conns, res.CmdConns, res.PubSubConns, res.OtherConns = map[string]int{}, map[string]int{}, map[string]int{}, map[string]int{}
	for _, s := range servers {
		c, b := conns[s], base[s]
		res.CmdConns[s], res.PubSubConns[s], res.OtherConns[s] = c.publish-b.publish, c.pubsub-b.pubsub, c.other-b.other
		res.Conns[s] = res.CmdConns[s] + res.PubSubConns[s] + res.OtherConns[s]
	}
	res.Seconds = t1.Sub(t0).Seconds()
	for i := range counts {
		res.Ops += counts[i].inWin.Load()
		res.Calls += counts[i].n.Load()
	}
	res.Probed = probe1 - probe0
	res.Rate = float64(res.Ops) / res.Seconds
	res.P50us = float64(hist.Quantile(0.5)) / 1e3
	res.P99us = float64(hist.Quantile(0.99)) / 1e3
	res.GCShare = rt0.GCShare(rt1)
	if res.Ops > 0 {
		// The CPU window and the calls started in it are the same span,
		// give or take one call per goroutine at each end.
		res.ClientCPUns = float64(cpu1-cpu0) / float64(res.Ops)
		res.RedisCPUns = float64(rcpu1-rcpu0) / float64(res.Ops)
		res.AllocsPerOp = float64(ms1.Mallocs-ms0.Mallocs) / float64(res.Ops)
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

// fill makes l's calls 0 … n-1 once each, spread over its goroutines,
// and stops at the first error: with a call that writes entry i, each
// run starts with the same entries in Redis (and their TTL fresh).
func (l callLoad) fill(ctx context.Context, n int) error {
	var wg sync.WaitGroup
	var first atomic.Value
	for g := range l.workers {
		wg.Go(func() {
			for i := g; i < n && ctx.Err() == nil; i += l.workers {
				if _, err := l.call(g, i); err != nil {
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
