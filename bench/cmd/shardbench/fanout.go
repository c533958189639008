package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardcast/shardcast/bench/internal/engines"
	"github.com/shardcast/shardcast/bench/internal/launch"
	"github.com/shardcast/shardcast/bench/internal/measure"
	"github.com/shardcast/shardcast/cluster"
)

// The fanout scenario measures what replicas buy at high fan-out: every
// one of -fanout-subscribers brokers (standing for as many server nodes)
// subscribes to every one of -fanout-channels channels, so each SPUBLISH
// is written to one connection per broker. Redis relays every SPUBLISH
// to each node of its shard over the cluster bus; a node then writes it
// to the subscribers it holds. Subscribing on replicas moves those writes
// off the master.
//
// The publishers publish at a fixed rate, not closed-loop: every row then
// asks the same work of Redis and the CPU per delivered message compares
// like with like, and on a small machine a closed loop would measure the
// benchmark process (N decoding brokers) rather than Redis, whose CPU per
// message would move with whatever rate the client reached.

// fanoutRow is one row of the scenario: an engine and where it subscribes.
type fanoutRow struct {
	Name string
	// On is shardcast's SubscribeOn; ignored for Centrifuge.
	On cluster.SubscribeOn
	// Centrifuge rows use Centrifuge's RedisBroker, with
	// SubscribeOnReplica when Replica is set.
	Centrifuge, Replica bool
}

// fanoutRows are the rows -fanout-rows can name, in the order they run.
var fanoutRows = []fanoutRow{
	{Name: "masters", On: cluster.Masters},
	{Name: "replicas", On: cluster.Replicas},
	{Name: "allnodes", On: cluster.AllNodes},
	{Name: "centrifuge-replica", Centrifuge: true, Replica: true},
	{Name: "centrifuge", Centrifuge: true},
}

// fanoutRowsOf returns the rows a -fanout-rows list names, in run order.
func fanoutRowsOf(list string) ([]fanoutRow, error) {
	want := splitList(list)
	var out []fanoutRow
	for _, r := range fanoutRows {
		if slices.Contains(want, r.Name) {
			out = append(out, r)
		}
	}
	for _, w := range want {
		if !slices.ContainsFunc(fanoutRows, func(r fanoutRow) bool { return r.Name == w }) {
			var have []string
			for _, r := range fanoutRows {
				have = append(have, r.Name)
			}
			return nil, fmt.Errorf("-fanout-rows: unknown row %q (have %s)", w, strings.Join(have, ", "))
		}
	}
	if len(out) == 0 {
		return nil, errors.New("-fanout-rows names no row")
	}
	return out, nil
}

// label is the row's name in the table.
func (r fanoutRow) label() string {
	switch {
	case r.Centrifuge && r.Replica:
		return "centrifuge SubscribeOnReplica"
	case r.Centrifuge:
		return "centrifuge (masters)"
	}
	return "shardcast " + r.On.String()
}

type fanoutResult struct {
	Scenario    string  `json:"scenario"`
	Row         string  `json:"row"`
	Round       int     `json:"round"`
	Redis       string  `json:"redis_version"`
	Subscribers int     `json:"subscribers"`
	Channels    int     `json:"channels"`
	Rate        int     `json:"target_publishes_per_sec"`
	PubRate     float64 `json:"publishes_per_sec"`
	PubErrors   int64   `json:"publish_errors"`
	Delivered   float64 `json:"delivered_per_sec"`
	// DeliveredShare is delivered / (published × subscribers) over the
	// window (counted by arrival time, so it can pass 1 slightly).
	DeliveredShare float64 `json:"delivered_share"`
	Busiest        string  `json:"busiest_node"`
	BusiestRole    string  `json:"busiest_role"`
	// CPU per delivered message in ns: the busiest redis-server, and the
	// sum over masters and over replicas.
	BusiestCPUPerMsg float64            `json:"busiest_cpu_ns_per_msg"`
	MasterCPUPerMsg  float64            `json:"masters_cpu_ns_per_msg"`
	ReplicaCPUPerMsg float64            `json:"replicas_cpu_ns_per_msg"`
	NodeCPUms        map[string]float64 `json:"node_cpu_ms"`
	// ClientCPUPerMsg is the benchmark process's CPU (every broker and
	// the publishers) per delivered message, in ns.
	ClientCPUPerMsg float64 `json:"client_cpu_ns_per_msg"`
	// Ratio is BusiestCPUPerMsg over the Masters row's of the same round.
	Ratio    float64        `json:"ratio_to_masters,omitempty"`
	SubConns map[string]int `json:"subscribe_connections_per_node"`
	SubMin   int            `json:"subscribe_connections_min"`
	SubMax   int            `json:"subscribe_connections_max"`
	// SetupSecs is from creating the first subscriber to every Subscribe
	// returning; CloseSecs from closing the brokers until the nodes are
	// back to the connections and shard channels they had before.
	SetupSecs float64 `json:"setup_secs"`
	CloseSecs float64 `json:"close_secs"`
	// LeftConns and LeftShardChannels are what the brokers left on the
	// nodes once Close settled: connections over the count before the row,
	// and shard channels still subscribed.
	LeftConns         int    `json:"left_connections,omitempty"`
	LeftShardChannels int    `json:"left_shard_channels,omitempty"`
	Error             string `json:"error,omitempty"`
}

// fanoutNode is one redis-server of the cluster.
type fanoutNode struct {
	Addr    string
	Replica bool
	PID     int
}

func runFanout(ctx context.Context, e *env) (section, error) {
	sec := section{Name: "fanout", Title: fmt.Sprintf("Fan-out over replicas (%d subscribers × %d channels)", cfg.fanoutSubscribers, cfg.fanoutChannels)}
	rows, err := fanoutRowsOf(cfg.fanoutRows)
	if err != nil {
		return sec, err
	}
	if cfg.fanoutSubscribers < 1 || cfg.fanoutChannels < 1 || cfg.fanoutRate < 1 || cfg.fanoutPublishers < 1 || cfg.fanoutPayload < 8 {
		return sec, errors.New("-fanout-subscribers, -fanout-channels, -fanout-rate and -fanout-publishers must be positive, -fanout-payload at least 8")
	}
	var seeds []string
	e.mu.Lock()
	given := e.given[3]
	if given {
		seeds = e.clusters[3]
	}
	e.mu.Unlock()
	if !given {
		bin, err := redisServerBin(cfg.fanoutRedis)
		if err != nil {
			return sec, err
		}
		progress("fanout: starting a 3-master cluster with 2 replicas per master (%s) …", bin)
		seeds, err = e.set.ClusterReplicas(ctx, 3, 2, bin)
		if err != nil {
			return sec, err
		}
		defer e.set.Stop(seeds)
	}
	nodes, err := waitReplicasListed(ctx, seeds, 2, 30*time.Second)
	if err != nil {
		return sec, err
	}
	version := "?"
	if m, err := measure.Info(nodes[0].Addr, "server"); err == nil {
		version = m["redis_version"]
	}
	tick := clockTicks()
	idleLo, idleHi, err := idleCPU(ctx, nodes, tick, fanoutIdle)
	if err != nil {
		return sec, err
	}
	progress("fanout: idle cluster: %.1f–%.1f ms of CPU per second per node", idleLo, idleHi)
	var results []fanoutResult
	for round := 1; round <= max(1, cfg.rounds); round++ {
		for _, row := range rows {
			progress("fanout: round %d, %s, %d subscribers × %d channels, %d publishes/s …", round, row.label(), cfg.fanoutSubscribers, cfg.fanoutChannels, cfg.fanoutRate)
			r := fanoutRun(ctx, row, seeds, nodes, tick)
			progress("   set up in %.1fs, closed in %.1fs", r.SetupSecs, r.CloseSecs)
			r.Scenario, r.Row, r.Round, r.Redis = "fanout", row.label(), round, version
			if r.Error != "" {
				progress("   error: %s", r.Error)
			} else {
				progress("   %s delivered/s (%.1f%% of published × subscribers), busiest %s (%s) %.0f ns/msg, subscribe conns per node %d–%d, %.0f publishes/s, client CPU %.0f ns/msg",
					fmtRate(r.Delivered), 100*r.DeliveredShare, r.Busiest, r.BusiestRole, r.BusiestCPUPerMsg, r.SubMin, r.SubMax, r.PubRate, r.ClientCPUPerMsg)
			}
			results = append(results, r)
			if ctx.Err() != nil {
				return sec, ctx.Err()
			}
		}
	}
	setRatios(results)
	for _, r := range results {
		emit(r)
	}

	var tr [][]string
	for _, r := range results {
		if r.Error != "" {
			tr = append(tr, []string{strconv.Itoa(r.Round), r.Row, "error: " + r.Error})
			continue
		}
		tr = append(tr, []string{strconv.Itoa(r.Round), r.Row, fmtPubRate(r.PubRate, r.Rate), fmtRate(r.Delivered), fmt.Sprintf("%.1f%%", 100*r.DeliveredShare),
			fmt.Sprintf("%s (%s)", r.Busiest, r.BusiestRole), fmt.Sprintf("%.0f ns", r.BusiestCPUPerMsg), fmtRatio(r.Ratio),
			fmt.Sprintf("%.0f ns", r.MasterCPUPerMsg), fmt.Sprintf("%.0f ns", r.ReplicaCPUPerMsg), fmt.Sprintf("%d–%d", r.SubMin, r.SubMax)})
	}
	head := []string{"round", "row", "publishes/s", "delivered/s", "delivered share", "busiest redis-server", "busiest CPU/msg", "× Masters",
		"masters CPU/msg", "replicas CPU/msg", "subscribe conns per node"}
	tbl := table(head, tr)
	show("fanout\n" + tbl)

	var b strings.Builder
	fmt.Fprintf(&b, "A 3-master Redis Cluster (redis-server %s) with 2 replicas per master, nine processes on loopback; before measuring, one write "+
		"to each shard moves the replicas' replication offsets so that CLUSTER SLOTS lists them. %d subscriber brokers run in the benchmark process, "+
		"each with its own connections as %d server nodes would have, each subscribed to all %d channels. %d publisher goroutines on one "+
		"publish-only broker of the same engine publish %d-byte payloads round-robin over the channels at a fixed %d publishes/s in all "+
		"(so every row asks the same of Redis), %s unmeasured, then %s measured. Rows run in a fixed order per round, on the same cluster, each "+
		"with fresh brokers closed before the next: shardcast `cluster.Config.SubscribeOn` = Masters, Replicas, AllNodes (128 partitions), and "+
		"Centrifuge v0.40.1's RedisBroker with %d sharded Pub/Sub partitions and `RedisBrokerConfig.SubscribeOnReplica` (with "+
		"`RedisShardConfig.ReplicaClientEnabled`, which it requires; rueidis then gives each slot one replica at random).\n\n",
		version, cfg.fanoutSubscribers, cfg.fanoutSubscribers, cfg.fanoutChannels, cfg.fanoutPublishers, cfg.fanoutPayload, cfg.fanoutRate,
		cfg.fanoutWarmup, cfg.fanoutDuration, cfg.fanoutCentPartitions)
	fmt.Fprintf(&b, "*Delivered/s* sums the messages every subscriber received in the window; *delivered share* is that over published × "+
		"subscribers (below 100%% means loss or a backlog). *Publishes/s* reads \"x of y\" when the publishers fell more than 5%% short of "+
		"the fixed rate (the benchmark process saturated): such a row puts less load on Redis than the others. CPU is utime+stime from /proc/PID/stat of every redis-server before and after the "+
		"window (%d ticks/s), divided by the messages delivered in it: *busiest* is the node that used the most, *masters* and *replicas* sum "+
		"each role. *× Masters* is the busiest CPU/msg over the shardcast Masters row of the same round. *Subscribe conns per node* counts "+
		"CLIENT LIST entries with `ssub` > 0 on each of the nine nodes at the end of the window, min–max. For scale: with no broker "+
		"connected, over %s before the first row, each node used %.1f–%.1f ms of CPU per second (cron, cluster bus, replication).\n\n",
		tick, fanoutIdle, idleLo, idleHi)
	b.WriteString(tbl)
	b.WriteString("\n")
	if t, ok := fanoutTarget(results, version); ok {
		sec.Targets = append(sec.Targets, t)
	}
	sec.Body = b.String()
	return sec, nil
}

// fanoutTarget judges the target on the median over the rounds of
// the AllNodes row's ratio to Masters; only Redis 7.4.1 can meet it.
func fanoutTarget(rs []fanoutResult, version string) (target, bool) {
	var ratios []float64
	for _, r := range rs {
		if r.Row == (fanoutRow{On: cluster.AllNodes}).label() && r.Error == "" && r.Ratio > 0 {
			ratios = append(ratios, r.Ratio)
		}
	}
	if len(ratios) == 0 {
		return target{}, false
	}
	slices.Sort(ratios)
	med := ratios[len(ratios)/2]
	if len(ratios)%2 == 0 {
		med = (ratios[len(ratios)/2-1] + ratios[len(ratios)/2]) / 2
	}
	met := metStr(med <= 0.7)
	if version != "7.4.1" {
		met = "n/a (needs Redis 7.4.1: -fanout-redis)"
	}
	return target{"fanout: busiest redis-server CPU per delivered message with SubscribeOn=AllNodes at most 0.7× Masters (Redis 7.4.1)",
		fmt.Sprintf("%.2f× (median of %d rounds, Redis %s)", med, len(ratios), version), met}, true
}

// fmtPubRate renders the achieved publish rate, with the target when it
// fell more than 5% short.
func fmtPubRate(got float64, want int) string {
	if got < 0.95*float64(want) {
		return fmt.Sprintf("%s of %s", fmtRate(got), fmtRate(float64(want)))
	}
	return fmtRate(got)
}

// fanoutIdle is how long the scenario measures the idle cluster's CPU.
const fanoutIdle = 2 * time.Second

// idleCPU returns the least and the most CPU, in ms per second, that a
// node used over d with nothing connected.
func idleCPU(ctx context.Context, nodes []fanoutNode, tick int, d time.Duration) (lo, hi float64, err error) {
	c0, err := nodeTicks(nodes)
	if err != nil {
		return 0, 0, err
	}
	t0 := time.Now()
	sleepCtx(ctx, d)
	c1, err := nodeTicks(nodes)
	if err != nil {
		return 0, 0, err
	}
	secs := time.Since(t0).Seconds()
	for i := range nodes {
		v := float64(c1[i]-c0[i]) * 1000 / float64(tick) / secs
		if i == 0 || v < lo {
			lo = v
		}
		if i == 0 || v > hi {
			hi = v
		}
	}
	return lo, hi, nil
}

// redisServerBin resolves -fanout-redis: a redis-server binary, a folder
// holding one, or "" for the one in PATH.
func redisServerBin(p string) (string, error) {
	if p == "" {
		return exec.LookPath("redis-server")
	}
	st, err := os.Stat(p)
	if err != nil {
		return "", fmt.Errorf("-fanout-redis: %w", err)
	}
	if st.IsDir() {
		p = filepath.Join(p, "redis-server")
	}
	return filepath.Abs(p)
}

// waitReplicasListed writes to every shard until CLUSTER SLOTS lists
// replicas replicas for every slot range, and returns every node.
func waitReplicasListed(ctx context.Context, seeds []string, replicas int, limit time.Duration) ([]fanoutNode, error) {
	deadline := time.Now().Add(limit)
	for i := 0; ; i++ {
		nodes, ok, err := clusterNodes(ctx, seeds, replicas)
		if err == nil && ok {
			for j := range nodes {
				m, err := measure.Info(nodes[j].Addr, "server")
				if err != nil {
					return nil, err
				}
				if nodes[j].PID, err = strconv.Atoi(m["process_id"]); err != nil {
					return nil, fmt.Errorf("%s: INFO server process_id %q", nodes[j].Addr, m["process_id"])
				}
			}
			return nodes, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("CLUSTER SLOTS does not list %d replicas per master after %s: %v", replicas, limit, err)
		}
		sm, err := slotMap(ctx, seeds)
		if err == nil {
			for _, r := range sm {
				key := keyInSlots(fmt.Sprintf("fanout:warm:%d:", i), r.Start, r.End)
				_, _ = launch.Command(r.Master, "SET", key, strconv.Itoa(i))
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// keyInSlots returns prefix+n for the first n whose slot is in [lo, hi].
func keyInSlots(prefix string, lo, hi int) string {
	for n := 0; ; n++ {
		k := prefix + strconv.Itoa(n)
		if s := keySlot(k); s >= lo && s <= hi {
			return k
		}
	}
}

// clusterNodes reads CLUSTER SLOTS: the masters in slot order, then the
// replicas, and whether every range lists at least replicas replicas.
func clusterNodes(ctx context.Context, seeds []string, replicas int) ([]fanoutNode, bool, error) {
	var lastErr error
	for _, s := range seeds {
		c := redis.NewClient(&redis.Options{Addr: s})
		slots, err := c.ClusterSlots(ctx).Result()
		_ = c.Close()
		if err != nil {
			lastErr = err
			continue
		}
		slices.SortFunc(slots, func(a, b redis.ClusterSlot) int { return a.Start - b.Start })
		var ms, rs []fanoutNode
		seen := map[string]bool{}
		ok := len(slots) > 0
		for _, r := range slots {
			if len(r.Nodes)-1 < replicas {
				ok = false
			}
			for i, n := range r.Nodes {
				if seen[n.Addr] {
					continue
				}
				seen[n.Addr] = true
				if i == 0 {
					ms = append(ms, fanoutNode{Addr: n.Addr})
				} else {
					rs = append(rs, fanoutNode{Addr: n.Addr, Replica: true})
				}
			}
		}
		return append(ms, rs...), ok, nil
	}
	return nil, false, fmt.Errorf("CLUSTER SLOTS: %w", lastErr)
}

func fanoutRun(ctx context.Context, row fanoutRow, seeds []string, nodes []fanoutNode, tick int) (res fanoutResult) {
	n, nc := cfg.fanoutSubscribers, cfg.fanoutChannels
	res.Subscribers, res.Channels, res.Rate = n, nc, cfg.fanoutRate
	addrs := make([]string, len(nodes))
	for i, nd := range nodes {
		addrs[i] = nd.Addr
	}
	deadline := time.Now().Add(10 * time.Second)
	for shardChannels(addrs) != 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	base := measure.Clients(addrs)
	var delivered atomic.Int64
	recv := func(string, []byte, time.Time) { delivered.Add(1) }
	newEngine := func(publisher bool) (engines.Engine, error) {
		if row.Centrifuge {
			return engines.NewCentrifugeCluster(seeds, recv, cfg.fanoutCentPartitions, row.Replica && !publisher, publisher)
		}
		on := row.On
		if publisher {
			on = cluster.Masters
		}
		return engines.NewClusterOn(engines.Target{Cluster: seeds}, tuning(), recv, on)
	}
	var engs []engines.Engine
	defer func() {
		c0 := time.Now()
		for _, eng := range engs {
			_ = eng.Close()
		}
		// Wait until the nodes hold no shard channel and the connections
		// are back to their count before the row, or have stayed the same
		// for a second (Centrifuge's RedisShard.Close leaves its replica
		// client open), for at most 20 s.
		deadline := time.Now().Add(20 * time.Second)
		last, since := -1, time.Now()
		for time.Now().Before(deadline) {
			conns, sch := measure.Clients(addrs), shardChannels(addrs)
			if conns != last {
				last, since = conns, time.Now()
			}
			if sch == 0 && (conns <= base || time.Since(since) >= time.Second) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		res.CloseSecs = time.Since(c0).Seconds()
		if extra, sch := measure.Clients(addrs)-base, shardChannels(addrs); extra > 0 || sch > 0 {
			res.LeftConns, res.LeftShardChannels = extra, sch
			progress("   after Close: %d connections more than before the row, %d shard channels still subscribed", extra, sch)
		}
	}()
	s0 := time.Now()
	subs := make([]engines.Engine, n)
	for i := range n {
		eng, err := newEngine(false)
		if err != nil {
			res.Error = fmt.Sprintf("subscriber %d: %v", i, err)
			return res
		}
		subs[i] = eng
		engs = append(engs, eng)
	}
	names := channelNames(fmt.Sprintf("fo:%s:", strings.ReplaceAll(row.Name, "-", "")), nc)
	var firstErr atomic.Value
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			sctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			if err := subs[i].Subscribe(sctx, names); err != nil {
				firstErr.CompareAndSwap(nil, fmt.Sprintf("subscribe %d: %v", i, err))
			}
		}()
	}
	wg.Wait()
	if e, ok := firstErr.Load().(string); ok {
		res.Error = e
		return res
	}
	res.SetupSecs = time.Since(s0).Seconds()
	pub, err := newEngine(true)
	if err != nil {
		res.Error = fmt.Sprintf("publisher: %v", err)
		return res
	}
	engs = append(engs, pub)

	pctx, stop := context.WithCancel(ctx)
	defer stop()
	var published, pubErrs atomic.Int64
	var pw sync.WaitGroup
	np := cfg.fanoutPublishers
	interval := time.Duration(float64(time.Second) * float64(np) / float64(cfg.fanoutRate))
	backlog := max(1, int(fanoutBacklog/interval))
	start := time.Now()
	for g := range np {
		pw.Add(1)
		go func() {
			defer pw.Done()
			buf := make([]byte, cfg.fanoutPayload)
			sent := 0
			for k := g; pctx.Err() == nil; {
				due := int(time.Since(start) / interval)
				sent = skipBacklog(due, sent, backlog)
				for ; sent < due && pctx.Err() == nil; sent++ {
					engines.Stamp(buf, time.Now())
					if err := pub.Publish(pctx, names[k%nc], buf); err != nil {
						if pctx.Err() == nil {
							pubErrs.Add(1)
						}
					} else {
						published.Add(1)
					}
					k += np
				}
				sleepCtx(pctx, time.Millisecond)
			}
		}()
	}
	sleepCtx(ctx, cfg.fanoutWarmup)
	cpu0, err := nodeTicks(nodes)
	if err != nil {
		res.Error = err.Error()
		stop()
		pw.Wait()
		return res
	}
	d0, p0, e0, t0, pc0 := delivered.Load(), published.Load(), pubErrs.Load(), time.Now(), measure.ProcessCPU()
	sleepCtx(ctx, cfg.fanoutDuration)
	cpu1, err := nodeTicks(nodes)
	d1, p1, e1, t1, pc1 := delivered.Load(), published.Load(), pubErrs.Load(), time.Now(), measure.ProcessCPU()
	res.SubConns = map[string]int{}
	for _, nd := range nodes {
		if list, err := launch.Command(nd.Addr, "CLIENT", "LIST"); err == nil {
			res.SubConns[nd.Addr] = ssubConns(list)
		}
	}
	stop()
	pw.Wait()
	if err != nil {
		res.Error = err.Error()
		return res
	}
	secs := t1.Sub(t0).Seconds()
	msgs := float64(d1 - d0)
	res.Delivered = msgs / secs
	res.PubRate = float64(p1-p0) / secs
	res.PubErrors = e1 - e0
	if p1 > p0 {
		res.DeliveredShare = msgs / (float64(p1-p0) * float64(n))
	}
	res.NodeCPUms = map[string]float64{}
	var busiest, mastersTicks, replicasTicks int64
	for i, nd := range nodes {
		dt := cpu1[i] - cpu0[i]
		res.NodeCPUms[nd.Addr] = float64(dt) * 1000 / float64(tick)
		if nd.Replica {
			replicasTicks += dt
		} else {
			mastersTicks += dt
		}
		if res.Busiest == "" || dt > busiest {
			busiest, res.Busiest = dt, nd.Addr
			res.BusiestRole = "master"
			if nd.Replica {
				res.BusiestRole = "replica"
			}
		}
	}
	if msgs > 0 {
		res.ClientCPUPerMsg = float64(pc1-pc0) / msgs
	}
	res.BusiestCPUPerMsg = ticksPerMsg(busiest, tick, msgs)
	res.MasterCPUPerMsg = ticksPerMsg(mastersTicks, tick, msgs)
	res.ReplicaCPUPerMsg = ticksPerMsg(replicasTicks, tick, msgs)
	res.SubMin, res.SubMax = minMax(res.SubConns)
	if msgs == 0 {
		res.Error = "no message delivered in the window"
	}
	return res
}

// fanoutBacklog is how far a publisher may fall behind its schedule and
// still catch up: publishes due longer ago are skipped, so that a stall
// (a slow subscribe, a descheduled process) is not made up for by a burst
// above the fixed rate inside the window.
const fanoutBacklog = 100 * time.Millisecond

// skipBacklog returns the schedule slots a publisher counts as done: sent,
// or due-backlog when more than backlog publishes are overdue.
func skipBacklog(due, sent, backlog int) int {
	if due-sent > backlog {
		return due - backlog
	}
	return sent
}

// ticksPerMsg is t clock ticks (tick per second) per message, in ns.
func ticksPerMsg(t int64, tick int, msgs float64) float64 {
	if msgs <= 0 || tick <= 0 {
		return 0
	}
	return float64(t) * 1e9 / float64(tick) / msgs
}

func minMax(m map[string]int) (lo, hi int) {
	first := true
	for _, v := range m {
		if first || v < lo {
			lo = v
		}
		if first || v > hi {
			hi = v
		}
		first = false
	}
	return lo, hi
}

// setRatios sets every row's Ratio: its BusiestCPUPerMsg over that of the
// shardcast Masters row of the same round (none without one).
func setRatios(rs []fanoutResult) {
	masters := (fanoutRow{On: cluster.Masters}).label()
	base := map[int]float64{}
	for _, r := range rs {
		if r.Row == masters && r.Error == "" && r.BusiestCPUPerMsg > 0 {
			base[r.Round] = r.BusiestCPUPerMsg
		}
	}
	for i := range rs {
		if b := base[rs[i].Round]; b > 0 && rs[i].Error == "" {
			rs[i].Ratio = rs[i].BusiestCPUPerMsg / b
		}
	}
}

func fmtRatio(r float64) string {
	if r <= 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f×", r)
}

// nodeTicks reads utime+stime of every node's process.
func nodeTicks(nodes []fanoutNode) ([]int64, error) {
	out := make([]int64, len(nodes))
	for i, nd := range nodes {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", nd.PID))
		if err != nil {
			return nil, fmt.Errorf("%s (pid %d): %w (the fanout scenario reads the CPU of local redis-server processes)", nd.Addr, nd.PID, err)
		}
		if out[i], err = procStatTicks(string(b)); err != nil {
			return nil, fmt.Errorf("%s (pid %d): %w", nd.Addr, nd.PID, err)
		}
	}
	return out, nil
}

// procStatTicks returns utime+stime, in clock ticks, from the text of a
// /proc/PID/stat file: fields 14 and 15, counted after the command name,
// which is in parentheses and may itself hold spaces and parentheses.
func procStatTicks(stat string) (int64, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, errors.New("/proc stat: no command name")
	}
	f := strings.Fields(stat[i+1:])
	// f[0] is field 3 (state), so utime (14) is f[11] and stime (15) f[12].
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc stat: %d fields after the command name, want at least 13", len(f))
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc stat: utime %q, stime %q", f[11], f[12])
	}
	return ut + st, nil
}

// clockTicks is the kernel's clock ticks per second (getconf CLK_TCK),
// or 100, Linux's USER_HZ, when getconf cannot say.
func clockTicks() int {
	out, err := exec.Command("getconf", "CLK_TCK").Output()
	if err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(out))); err == nil && n > 0 {
			return n
		}
	}
	return 100
}

// ssubConns counts the CLIENT LIST entries holding a sharded
// subscription (ssub > 0).
func ssubConns(list string) int {
	n := 0
	for _, line := range strings.Split(list, "\n") {
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "ssub="); ok {
				if c, err := strconv.Atoi(v); err == nil && c > 0 {
					n++
				}
				break
			}
		}
	}
	return n
}
