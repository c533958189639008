package main

import (
	"context"
	"fmt"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardcast/shardcast/bench/internal/engines"
)

// probeRound is one round of the fleet's probes: every probe of every
// broker must deliver a message published at or after start.
type probeRound struct {
	start     int64           // UnixNano
	delivered [][]atomic.Bool // by broker, by probe
	remaining atomic.Int64    // probes not delivered yet
	last      atomic.Int64    // UnixNano of the last probe's delivery
}

func newProbeRound(probes []map[string]int, start time.Time) *probeRound {
	r := &probeRound{start: start.UnixNano(), delivered: make([][]atomic.Bool, len(probes))}
	n := 0
	for b, p := range probes {
		r.delivered[b] = make([]atomic.Bool, len(p))
		n += len(p)
	}
	r.remaining.Store(int64(n))
	return r
}

// deliver records that probe j of broker b delivered a message published
// at sentAt; one published before the round began proves nothing.
func (r *probeRound) deliver(b, j int, sentAt time.Time) {
	if sentAt.UnixNano() < r.start {
		return
	}
	if !r.delivered[b][j].Swap(true) && r.remaining.Add(-1) == 0 {
		r.last.Store(time.Now().UnixNano())
	}
}

// probeSweeps are the goroutines sweepProbes started, with what they
// published.
type probeSweeps struct {
	wg        sync.WaitGroup
	published atomic.Int64 // probe publishes
	longest   atomic.Int64 // ns, the longest sweep from first publish to last reply
}

// wait returns once every sweep goroutine has ended (after ctx ended, or
// once its broker's probes all delivered).
func (s *probeSweeps) wait() { s.wg.Wait() }

// sweepProbes starts, per broker, a goroutine labelled as the probes'
// (fleetSide) that publishes every fleetSweep one message to each of the
// broker's probes that has not yet delivered in round r, until all have or
// ctx ends.
func sweepProbes(ctx context.Context, engs []engines.Engine, probes []map[string]int, r *probeRound) *probeSweeps {
	s := &probeSweeps{}
	for b := range engs {
		s.wg.Add(1)
		go pprof.Do(ctx, pprof.Labels(fleetSide, "probe"), func(ctx context.Context) {
			defer s.wg.Done()
			s.sweep(ctx, engs[b], probes[b], r.delivered[b])
		})
	}
	return s
}

// sweep is one broker's probe loop. A sweep publishes its probes all at
// once: one after another, each waiting for its reply from a master busy
// with the resubscribe flood, a sweep of 128 took seconds at 200 brokers,
// and the storm's column measured the sweep instead of the recovery. An
// engine with PublishAsync keeps them in flight from this goroutine; any
// other gets a goroutine per probe. Those goroutines' creation and stack
// growth take CPU from the one core the brokers' recovery runs on.
func (s *probeSweeps) sweep(ctx context.Context, eng engines.Engine, probes map[string]int, delivered []atomic.Bool) {
	ae, async := engines.AsyncOf(eng)
	var sweep sync.WaitGroup
	buf := make([]byte, 64)
	for ctx.Err() == nil {
		sent, began := 0, time.Now()
		for ch, j := range probes {
			if delivered[j].Load() {
				continue
			}
			sent++
			if async {
				engines.Stamp(buf, time.Now()) // encoded before PublishAsync returns
				sweep.Add(1)
				if ae.PublishAsync(ctx, ch, buf, func(error) { sweep.Done() }) != nil {
					sweep.Done()
				}
				continue
			}
			sweep.Go(func() {
				buf := make([]byte, 64)
				engines.Stamp(buf, time.Now())
				_ = eng.Publish(ctx, ch, buf)
			})
		}
		sweep.Wait()
		s.published.Add(int64(sent))
		if sent == 0 {
			return
		}
		for took := time.Since(began).Nanoseconds(); ; {
			cur := s.longest.Load()
			if took <= cur || s.longest.CompareAndSwap(cur, took) {
				break
			}
		}
		sleepCtx(ctx, fleetSweep)
	}
}

// warmUp runs a probe round before the kill, stored in round for the
// brokers' handlers, until every probe of every broker delivered once, or
// limit passed, or ctx ended. The error says how many probes never
// delivered: the fleet was not delivering, and a storm would measure
// nothing.
func warmUp(ctx context.Context, engs []engines.Engine, probes []map[string]int, round *atomic.Pointer[probeRound], limit time.Duration) error {
	warm := newProbeRound(probes, time.Now())
	round.Store(warm)
	wctx, stop := context.WithCancel(ctx)
	sweeps := sweepProbes(wctx, engs, probes, warm)
	for until := time.Now().Add(limit); warm.remaining.Load() > 0 && time.Now().Before(until) && ctx.Err() == nil; {
		time.Sleep(5 * time.Millisecond)
	}
	stop()
	sweeps.wait()
	if n := warm.remaining.Load(); n > 0 {
		total := 0
		for _, p := range probes {
			total += len(p)
		}
		return fmt.Errorf("%d of %d probes never delivered before the kill", n, total)
	}
	return nil
}
