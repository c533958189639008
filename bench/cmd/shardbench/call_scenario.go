package main

import (
	"context"
	"fmt"
	"time"
)

// callScenario is what runCalls needs of the presence or map scenario.
type callScenario[R any] struct {
	name   string // "presence", "map": progress lines and messages
	engine string // "manager", "broker": what -engines names
	ops    []string
	// run runs one engine's call op on t as round round (0: the
	// warm-up), the result stamped with both.
	run func(ctx context.Context, name, op string, t callTopo, round int) R
	// runNote is the end of a run's progress line, after the measured
	// columns every scenario shows.
	runNote func(r R, t callTopo) string
	report  func(all []R, topos []callTopo, ops, names []string) callTables[R]
}

// runCalls runs s's every call on a standalone Redis and on the 3-master
// cluster, -rounds times, both engines (or those -engines names)
// interleaved round by round after one warm-up run that is not measured,
// emits every run and median, shows the tables and returns them.
func runCalls[R any, P callRun[R]](ctx context.Context, e *env, s callScenario[R]) (callTables[R], error) {
	var rep callTables[R]
	names := engineList([]string{centAdapter, centRedis})
	for _, n := range names {
		if n != centAdapter && n != centRedis {
			return rep, fmt.Errorf("%s scenario: unknown %s %q (have %s, %s)", s.name, s.engine, n, centAdapter, centRedis)
		}
	}
	topos, err := callTopos(ctx, e)
	if err != nil {
		return rep, err
	}

	holdHeap(cfg.heap)
	defer holdHeap(0)
	// As in the centrifuge scenario, the first run of a process can
	// measure less CPU than later ones: one run that is not measured
	// takes that place.
	progress("[%s] warm-up run of %s, not measured …", s.name, names[0])
	if r := s.run(ctx, names[0], s.ops[0], topos[0], 0); P(&r).calls().Error != "" {
		progress("   warm-up error: %s", P(&r).calls().Error)
	}
	var all []R
	total, n := len(topos)*len(s.ops)*cfg.rounds*len(names), 0
	for _, t := range topos {
		for _, op := range s.ops {
			for round := 1; round <= cfg.rounds; round++ {
				for _, name := range names {
					if ctx.Err() != nil {
						return rep, ctx.Err()
					}
					n++
					progress("[%s %d/%d] %s, %s, %s, round %d …", s.name, n, total, t.Name, name, op, round)
					r := s.run(ctx, name, op, t, round)
					emit(r)
					if c := P(&r).calls(); c.Error != "" {
						progress("   error: %s", c.Error)
					} else {
						progress("   %s ops/s, p50 %s, p99 %s, client CPU/op %s, Redis CPU/op %s, %s", fmtRate(c.Rate),
							fmtDur(time.Duration(c.P50us*1e3)), fmtDur(time.Duration(c.P99us*1e3)), fmtDur(time.Duration(c.ClientCPUns)),
							fmtDur(time.Duration(c.RedisCPUns)), s.runNote(r, t))
					}
					all = append(all, r)
				}
			}
		}
	}
	rep = s.report(all, topos, s.ops, names)
	for _, m := range rep.medians {
		emit(m)
	}
	show(s.name + "\n" + rep.runs + "\n" + rep.ratios + "\n" + rep.conns)
	return rep, nil
}
