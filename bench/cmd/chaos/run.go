package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/cluster"
	"github.com/shardcast/shardcast/redistest"
	"github.com/shardcast/shardcast/sharded"
)

// rig is one engine's Redis, brokers and faults.
type rig struct {
	pub, sub broker
	faults   map[string]fault
	in       where
	settled  func(ctx context.Context) error // waits for Redis to settle after the last fault
	frozen   []frozenSpan                    // masters paused (only the fault loop appends)
	nodes    func() []*redistest.Server      // cluster members, for the SPUBLISH count per node
	relayout *relayouter
	close    func()
}

func startRig(engine string, t *traffic, events *eventLog, cfg config, rng *rand.Rand) (*rig, error) {
	opts := shardcast.Options{Handler: t.handle, OnEvent: events.add}
	agreement := shardcast.Agreement{Heartbeat: relayoutHeartbeat}
	r := &rig{settled: func(context.Context) error { return nil }}
	var cleanups []func()
	r.close = func() {
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i]()
		}
	}
	switch engine {
	case "cluster":
		c, stop, err := redistest.StartSharedCluster(3, cfg.replicas)
		if err != nil {
			return nil, err
		}
		cleanups = append(cleanups, stop)
		sub, err := cluster.New(cluster.Config{Addrs: c.Seeds(), Options: opts, Agreement: agreement, SubscribeOn: cfg.subscribeOn})
		if err != nil {
			r.close()
			return nil, err
		}
		cleanups = append(cleanups, func() { _ = sub.Close() })
		pub, err := cluster.New(cluster.Config{Addrs: c.Seeds(), Agreement: agreement})
		if err != nil {
			r.close()
			return nil, err
		}
		cleanups = append(cleanups, func() { _ = pub.Close() })
		l := sub.Layout()
		r.pub, r.sub = pub, sub
		r.in = where{Partition: l.Partition}
		r.faults = clusterFaults(c, l, rng, cfg.gap, func(f frozenSpan) { r.frozen = append(r.frozen, f) })
		hctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		atomic, err := c.Nodes()[0].HasAtomicMigration(hctx)
		cancel()
		if err != nil {
			r.close()
			return nil, err
		}
		if !atomic {
			delete(r.faults, atomicFault)
		}
		r.settled = c.WaitConverged
		r.nodes = c.Nodes
		seeds := c.Seeds()
		rcfg := func() cluster.RelayoutConfig {
			return cluster.RelayoutConfig{Addrs: seeds, Agreement: agreement}
		}
		r.relayout = &relayouter{
			run: func(ctx context.Context) (shardcast.RelayoutReport, error) {
				prefix := "x:"
				if sub.Layout().Prefix() == prefix {
					prefix = ""
				}
				cfg := rcfg()
				cfg.Prefix = &prefix
				return cluster.Relayout(ctx, cfg)
			},
			abort: func(ctx context.Context) error { return cluster.AbortRelayout(ctx, rcfg()) },
			describe: func() string {
				return fmt.Sprintf("prefix %q (publisher on %q)", sub.Layout().Prefix(), pub.Layout().Prefix())
			},
		}
	case "sharded":
		var servers []*redistest.Server
		var addrs []string
		// The brokers start on the first 3; a re-layout adds the 4th and
		// the next one removes it again.
		for range 4 {
			s, stop, err := redistest.StartSharedStandalone()
			if err != nil {
				r.close()
				return nil, err
			}
			cleanups = append(cleanups, stop)
			servers = append(servers, s)
			addrs = append(addrs, s.Addr())
		}
		sub, err := sharded.New(sharded.Config{Addrs: addrs[:3], Options: opts, Agreement: agreement})
		if err != nil {
			r.close()
			return nil, err
		}
		cleanups = append(cleanups, func() { _ = sub.Close() })
		pub, err := sharded.New(sharded.Config{Addrs: addrs[:3], Agreement: agreement})
		if err != nil {
			r.close()
			return nil, err
		}
		cleanups = append(cleanups, func() { _ = pub.Close() })
		r.pub, r.sub = pub, sub
		// Under either list: an event of a shard covers the channels
		// it held at some point.
		r.in = where{Shards: func(ch string) []string {
			if r.relayout == nil {
				return []string{addrs[sharded.InstanceOf(ch, 3)]}
			}
			return slices.Compact([]string{addrs[sharded.InstanceOf(ch, 3)], addrs[sharded.InstanceOf(ch, 4)]})
		}}
		r.faults = shardedFaults(servers, rng, cfg.down, cfg.pause)
		rcfg := func(to []string) sharded.RelayoutConfig {
			return sharded.RelayoutConfig{ControlAddr: addrs[0], To: to, Agreement: agreement}
		}
		r.relayout = &relayouter{
			run: func(ctx context.Context) (shardcast.RelayoutReport, error) {
				to := addrs
				if len(sub.Instances()) == 4 {
					to = addrs[:3]
				}
				return sharded.Relayout(ctx, rcfg(to))
			},
			abort: func(ctx context.Context) error { return sharded.AbortRelayout(ctx, rcfg(nil)) },
			describe: func() string {
				return fmt.Sprintf("%d instances (publisher on %d)", len(sub.Instances()), len(pub.Instances()))
			},
		}
	case "sentinel":
		// Two shards of a master and two replicas each, behind three
		// Sentinels; no re-layout in this mode (TestSentinelRelayout moves
		// Sentinel shards online).
		var groups []redistest.SentinelGroup
		for _, name := range []string{"a", "b"} {
			g, stop, err := redistest.StartSharedReplicated(2)
			if err != nil {
				r.close()
				return nil, err
			}
			cleanups = append(cleanups, stop)
			groups = append(groups, redistest.SentinelGroup{Name: name, Servers: g})
		}
		s, stop, err := redistest.StartSharedSentinels(3, groups...)
		if err != nil {
			r.close()
			return nil, err
		}
		cleanups = append(cleanups, stop)
		urls := []string{s.URL("a"), s.URL("b")}
		on := sharded.Masters
		if cfg.subscribeOn != cluster.Masters {
			on = sharded.Replicas
		}
		sub, err := sharded.New(sharded.Config{Addrs: urls, Options: opts, Agreement: agreement, SubscribeOn: on})
		if err != nil {
			r.close()
			return nil, err
		}
		cleanups = append(cleanups, func() { _ = sub.Close() })
		pub, err := sharded.New(sharded.Config{Addrs: urls, Agreement: agreement})
		if err != nil {
			r.close()
			return nil, err
		}
		cleanups = append(cleanups, func() { _ = pub.Close() })
		r.pub, r.sub = pub, sub
		r.faults = sentinelFaults(s, groups, rng, cfg.down, cfg.pause)
		r.settled = s.WaitReady
	}
	return r, nil
}

// runEngine runs the whole soak on one engine and prints its report. It
// returns false when the run broke a promise.
func runEngine(ctx context.Context, engine string, cfg config) (bool, error) {
	names, err := selectFaults(engine, cfg.faults)
	if err != nil {
		return false, err
	}
	rng := rand.New(rand.NewPCG(cfg.seed, 0x5eed))
	t := newTraffic(cfg.channels, cfg.publishTimeout)
	events := &eventLog{verbose: cfg.verbose}
	logf("%s: starting Redis", engine)
	r, err := startRig(engine, t, events, cfg, rng)
	if err != nil {
		return false, err
	}
	defer r.close()
	// A fault the server cannot run (atomicmove without CLUSTER
	// MIGRATESLOTS) leaves the default list and fails a list that names it.
	for _, n := range names {
		if _, ok := r.faults[n]; !ok && n != "relayout" {
			if cfg.faults != "" {
				return false, fmt.Errorf("fault %s: the server cannot run it", n)
			}
			logf("%s: fault %s left out: the server cannot run it", engine, n)
		}
	}
	names = slices.DeleteFunc(names, func(n string) bool { _, ok := r.faults[n]; return !ok && n != "relayout" })
	if slices.Contains(names, "relayout") {
		others := slices.DeleteFunc(slices.Clone(names), func(n string) bool { return n == "relayout" })
		r.faults["relayout"] = r.relayout.fault(others, r.faults, rng)
	} else {
		r.relayout = nil
	}

	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	err = r.sub.Subscribe(sctx, t.names...)
	cancel()
	if err != nil {
		return false, fmt.Errorf("subscribe: %w", err)
	}
	logf("%s: %d channels subscribed; publishing ~%d/s; faults %s for %v (seed %d)",
		engine, len(t.names), cfg.rate, strings.Join(names, ","), cfg.duration, cfg.seed)
	began := time.Now()
	t.start(r.pub, cfg.rate, cfg.publishers)
	var runs map[string]int
	var ferrs int
	if err := sleepCtx(ctx, 2*time.Second); err == nil {
		fctx, cancel := context.WithTimeout(ctx, cfg.duration)
		runs, ferrs = runFaults(fctx, names, r.faults, rng, cfg.gap)
		cancel()
	}
	wctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	if err := r.settled(wctx); err != nil {
		logf("%s: Redis did not settle after the last fault: %v", engine, err)
	}
	cancel()
	_ = sleepCtx(context.Background(), cfg.settle)
	t.halt()
	faultsEnded := time.Since(began)
	logf("%s: traffic stopped; probing every channel", engine)
	t.probe(r.pub, 20)
	dead := t.waitDelivered(20 * time.Second)
	waitQuiet(r.sub, 5*time.Second)
	agree := waitUntil(context.Background(), 10*time.Second, func() bool { return r.sub.Fingerprint() == r.pub.Fingerprint() }) == nil

	if cfg.eventsFile != "" {
		if f, err := os.Create(cfg.eventsFile + "." + engine); err == nil {
			events.dump(f)
			_ = f.Close()
		}
	}
	rep := check(t.records(), events.snapshot(), r.in, cfg.tolerance)
	st, pst := r.sub.Stats(), r.pub.Stats()
	mode := ""
	if engine == "cluster" {
		mode = fmt.Sprintf(", 3×%d, SubscribeOn %v", cfg.replicas, cfg.subscribeOn)
	}
	fmt.Printf("== %s engine%s: %v of traffic, %d channels, target %d/s, seed %d\n",
		engine, mode, faultsEnded.Round(time.Second), len(t.names), cfg.rate, cfg.seed)
	printRuns(runs, ferrs)
	if r.relayout != nil {
		fmt.Printf("re-layouts      %s\n", r.relayout.summary())
	}
	fmt.Printf("layouts         subscriber %s, publisher %s\n", r.sub.Fingerprint(), r.pub.Fingerprint())
	fmt.Printf("accepted        %d publishes (%.0f/s); %d failed, %d of those delivered anyway\n",
		rep.Accepted, float64(rep.Accepted+rep.Failed)/faultsEnded.Seconds(), rep.Failed, rep.FailedDelivered)
	fmt.Printf("delivered       %d of the accepted\n", rep.Delivered)
	fmt.Printf("lost            %d: %d inside a reported window (%d only within ±%v), %d silent\n",
		rep.Lost, rep.LostReported, rep.LostTolerance, cfg.tolerance, rep.LostSilent)
	fmt.Printf("duplicates      %d\n", rep.Duplicates)
	fmt.Printf("reordered       %d (failed publishes arriving late, allowed: %d)\n", rep.Reordered, rep.LateFailed)
	fmt.Printf("dead channels   %d of %d\n", len(dead), len(t.names))
	fmt.Printf("unrestored      %d channels reported interrupted and never restored\n", rep.Unrestored)
	fmt.Printf("events          %d interrupted, %d restored, %d dropped (%d messages); longest window %v\n",
		rep.Interrupted, rep.Restored, rep.DroppedEvents, rep.DroppedCount, rep.LongestWindow.Round(time.Millisecond))
	fmt.Printf("stats (sub)     received %d, delivered %d, dropped %d, reconnects %d, stale %d; (pub) published %d\n",
		st.Received, st.Delivered, st.Dropped, st.Reconnects, st.Stale, pst.Published)
	if t.badRecv > 0 || rep.Unknown > 0 {
		fmt.Printf("unexpected      %d undecodable deliveries, %d of numbers never published\n", t.badRecv, rep.Unknown)
		for _, b := range t.badSeen {
			fmt.Printf("  undecodable: %s\n", b)
		}
	}
	if engine == "cluster" {
		n, samples := ackedWhileFrozen(t.records(), r.frozen, r.in.Partition)
		fmt.Printf("acked frozen    %d publishes acknowledged while their partition's master was SIGSTOPped (should be 0)\n", n)
		for _, s := range samples {
			fmt.Printf("  %s\n", s)
		}
	}
	if r.nodes != nil {
		fmt.Printf("spublish calls  %s\n", spublishByNode(r.nodes()))
	}
	for _, s := range rep.Samples {
		fmt.Printf("  %s\n", s)
	}
	if len(dead) > 0 {
		fmt.Printf("  dead: %s\n", strings.Join(head(dead, 10), " "))
	}
	ok := !rep.bad() && len(dead) == 0 && t.badRecv == 0 && rep.Unknown == 0 && agree
	verdict := "OK"
	if !ok {
		verdict = "FAIL"
	}
	fmt.Printf("verdict         %s\n", verdict)
	return ok, nil
}

func printRuns(runs map[string]int, errs int) {
	var parts []string
	for _, n := range slices.Compact(slices.Sorted(slices.Values(slices.Concat(clusterFaultNames, shardedFaultNames, sentinelFaultNames)))) {
		if runs[n] > 0 {
			parts = append(parts, fmt.Sprintf("%s×%d", n, runs[n]))
		}
	}
	fmt.Printf("faults          %s; %d failed to run\n", strings.Join(parts, " "), errs)
}

// waitQuiet waits until the subscribing broker's worker queues are empty
// and nothing new arrived for a little while, at most timeout.
func waitQuiet(b broker, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	last := b.Stats().Received
	for time.Now().Before(deadline) {
		time.Sleep(300 * time.Millisecond)
		st := b.Stats()
		if st.Received == last && st.QueueDepth == 0 {
			return
		}
		last = st.Received
	}
	fmt.Fprintln(os.Stderr, "chaos: deliveries still trickling in at the end check")
}

func head[T any](s []T, n int) []T {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// spublishByNode says how many SPUBLISH commands each running node ran
// since it (re)started, and its role now: a replica accepts SPUBLISH for
// its master's slots, so a publisher with a stale route shows up here.
func spublishByNode(nodes []*redistest.Server) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var parts []string
	for _, n := range nodes {
		if !n.Running() {
			continue
		}
		st, err := n.CommandStats(ctx)
		if err != nil {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s(%s)=%d", n.Addr(), role(ctx, n), st["spublish"]))
	}
	return strings.Join(parts, " ")
}
