package main

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
)

// perMasterInts renders one number per master, in master order.
func perMasterInts(m map[string]int, servers []string) string {
	out := make([]string, len(servers))
	for i, s := range servers {
		out[i] = strconv.Itoa(m[s])
	}
	return strings.Join(out, " / ")
}

// perMasterMs renders one duration in ms per master, in master order.
func perMasterMs(m map[string]float64, servers []string) string {
	out := make([]string, len(servers))
	for i, s := range servers {
		out[i] = fmt.Sprintf("%.0fms", m[s])
	}
	return strings.Join(out, " / ")
}

func fleetTable(results []fleetResult, servers []string) string {
	var rows [][]string
	for _, r := range results {
		if r.Error != "" {
			rows = append(rows, []string{r.Engine, strconv.Itoa(r.Brokers), strconv.Itoa(r.Channels), "error: " + r.Error})
			continue
		}
		var peak []string
		for _, s := range servers {
			peak = append(peak, fmt.Sprintf("%.0f%%", r.PeakCPU[s]))
		}
		restored := "–"
		if r.RestoredSecs > 0 {
			restored = fmt.Sprintf("%.3fs", r.RestoredSecs)
		}
		addr, pct := r.busiest()
		busiest := fmt.Sprintf("%.0fms (%.0f%%), %s", r.MasterCPUms[addr], pct, addr[strings.LastIndexByte(addr, ':')+1:])
		client := fmt.Sprintf("%.0fms (%.0f%%)", r.ClientCPUms, 100*r.ClientCPUms/(1000*r.RecoverSecs))
		if r.ProbeCPUms > 0 {
			client += fmt.Sprintf(", probes %.0fms", r.ProbeCPUms)
		}
		rows = append(rows, []string{r.Engine, strconv.Itoa(r.Brokers), strconv.Itoa(r.Channels), fmt.Sprintf("%.2fs", r.SubscribeSecs),
			perMasterInts(r.SubConns, servers), perMasterInts(r.SubConnsAfter, servers), perMasterInts(r.Conns, servers), strconv.Itoa(r.Killed),
			perMasterInts(r.SsubPerMaster, servers), fmt.Sprintf("%.3fs", r.ResubSecs), restored, fmt.Sprintf("%.3fs", r.DeliverSecs),
			fmt.Sprintf("**%.3fs**", r.RecoverSecs), strings.Join(peak, " / "), busiest, fmt.Sprintf("%.0fms", r.RedisCPUms), client,
			fmt.Sprintf("%d, longest sweep %.0fms", r.ProbePublishes, r.LongestSweepms), fmt.Sprintf("%.0fms / %s", r.ClientWaitms, perMasterMs(r.MasterWaitms, servers))})
	}
	head := []string{"engine", "brokers", "channels per broker", "initial subscribe", "subscribe conns per master before", "… after recovery",
		"all conns per master", "conns killed", "SSUBSCRIBE calls per master", "all subscribed again", "last EventRestored", "last probe delivered",
		"recovered", "peak Redis CPU per master (50 ms)", "busiest master over the storm", "Redis CPU", "client CPU", "probe publishes", "waiting for a CPU, client / masters"}
	return table(head, rows)
}

// fleetText is the section's method, and why a size runs with fewer
// channels per broker when it does.
func fleetText(results []fleetResult, servers []string, sizes []int) string {
	maxc := "?"
	if len(results) > 0 {
		maxc = perMasterInts(results[len(results)-1].MaxClients, servers)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "A fresh 3-master cluster (no replicas). One storm per engine and fleet size (`-fleet-brokers` %s): that many brokers of the "+
		"engine run in the benchmark process, each with its own connections as that many server nodes would have, each subscribed to "+
		"*channels per broker* channels of its own (128 partitions per broker), then `CLIENT KILL TYPE pubsub` runs on every master at t=0. "+
		"Per-master figures are in master order %s. *Subscribe conns* are CLIENT LIST entries holding a subscription, just before the kill "+
		"and once the fleet has recovered; *all conns* are every connection the brokers opened. *SSUBSCRIBE calls* is the rise of "+
		"`cmdstat_ssubscribe` (INFO commandstats) from the kill until recovery. *All subscribed again* is when the sum of `pubsubshard_channels` "+
		"over the masters is back to its value before the kill. *Last probe delivered*: every broker has one probe channel in each of its "+
		"partitions (the engine's own channel→partition mapping; brokers × up to 128). Before the kill every probe delivers once, swept as below: the fleet is proven delivering, and each broker has run its delivery path (its workers' memory touched, its publish buffers grown) as a server's has when a storm hits it. From t=0 one goroutine per broker publishes, every %s, "+
		"one message to each of its probes that has not yet delivered a message published after t=0, all of them at once (PublishAsync "+
		"from that goroutine where the engine has it, else one goroutine each; *longest sweep* is the longest any broker's took from its first publish to its last reply, the probe's own resolution); "+
		"the column is when the last probe arrived. "+
		"*Recovered* is the later of the two: every channel subscribed on Redis and every partition of every broker delivering. "+
		"*Peak Redis CPU* is the highest rate of `used_cpu_sys+used_cpu_user` (INFO cpu) over %s samples, in %% of one core. "+
		"*Busiest master over the storm* is the CPU of the master that spent the most from t=0 to recovery, and that as a share of the "+
		"recovery time (100%% = one core the whole storm: Redis, single-threaded, was then what bounded it), with its port. *Client CPU* is "+
		"the benchmark process's over the same time (GOMAXPROCS %d; share of the recovery time), and of it the probes' publishing, from a CPU "+
		"profile of the storm split by the probe goroutines' pprof label (`-fleet-cpuprofile PREFIX` writes it); *probe publishes* counts "+
		"them. *Waiting for a CPU* is how long the benchmark process's threads and each master sat runnable in the kernel's run queue "+
		"during the storm (/proc/PID/task/*/schedstat): on this 2-core machine, shared with other work, a wait near the recovery time means "+
		"the process was short of CPU however little its own CPU time shows. Redis CPU includes the probes' publishes. maxclients per master: %s (Redis 7.0's default unless Centrifuge's brokers need more: "+
		"one subscribe connection per partition, %d × 128 over the three masters, plus command connections; the scenario raises it with "+
		"CONFIG SET when they would not fit).\n\n",
		joinInts(sizes, ", "), strings.Join(servers, ", "), fleetSweep, fleetSample, clientProcs, maxc, cfg.fleetCentBrokers)
	b.WriteString(fleetPaceNote(results, sizes))
	b.WriteString(fleetShrinkNote(results, len(servers)))
	b.WriteString(fleetCentNote(results, sizes))
	return b.String()
}

// fleetCentNote says why Centrifuge's fleet is smaller, from its row:
// memory would hold more of its brokers, the time to recover them not.
func fleetCentNote(results []fleetResult, sizes []int) string {
	i := slices.IndexFunc(results, func(r fleetResult) bool { return strings.HasPrefix(r.Engine, "centrifuge") && r.Error == "" })
	if i < 0 || slices.Contains(sizes, cfg.fleetCentBrokers) {
		return ""
	}
	r := results[i]
	perBroker := float64(r.HeapBytes) / float64(r.Brokers)
	fits := int(float64(memTotal()) / 2 / perBroker)
	return fmt.Sprintf("Centrifuge runs %d brokers (`-fleet-cent-brokers`), not %s. Each of its brokers holds 128 subscribe connections, and "+
		"rueidis gives every connection 0.5 MiB of read and 0.5 MiB of write buffer (Centrifuge does not expose these options): the process's "+
		"live heap after subscribing was %.0f MiB per broker, so half of this machine's %.0f GiB holds about %d of them. Time, not memory, "+
		"sets the size here: recovering the fleet took %.1f s of client CPU per broker, on the one core the benchmark process has "+
		"(GOMAXPROCS %d), so %d brokers would take some %.0f s. The shardcast row at %d brokers is the like-for-like comparison.\n\n",
		r.Brokers, joinInts(sizes, " or "), perBroker/(1<<20), float64(memTotal())/(1<<30), fits, r.ClientCPUms/1000/float64(r.Brokers),
		clientProcs, fits, r.ClientCPUms/1000/float64(r.Brokers)*float64(fits)/float64(clientProcs), r.Brokers)
}

// memTotal is the machine's memory (MemTotal of /proc/meminfo), or 0.
func memTotal() uint64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// fleetPaceNote reads the largest shardcast fleet's row: whether the
// benchmark process or the busiest master was busy for most of the storm,
// or both mostly waited for a core.
func fleetPaceNote(results []fleetResult, sizes []int) string {
	largest := slices.Max(sizes)
	i := slices.IndexFunc(results, func(r fleetResult) bool {
		return r.Engine == "shardcast-cluster" && r.Brokers == largest && r.Error == "" && r.RecoverSecs > 0
	})
	if i < 0 {
		return ""
	}
	r := results[i]
	ms := 1000 * r.RecoverSecs
	client := r.ClientCPUms / ms / float64(clientProcs)
	_, master := r.busiest()
	master /= 100
	waited := min(1, r.ClientWaitms/ms)
	var b strings.Builder
	fmt.Fprintf(&b, "At %d brokers the benchmark process (every broker on GOMAXPROCS %d) ran %.0f%% of the storm and waited for a core "+
		"%.0f%% of it (%.0f ms in the run queue), the busiest master ran %.0f%%: ", r.Brokers, clientProcs, 100*client, 100*waited,
		r.ClientWaitms, 100*master)
	switch {
	case client+waited >= 0.8 && client > master:
		b.WriteString("the client, every broker's recovery on one core, set the pace")
		if waited >= 0.25 {
			b.WriteString(", slowed by the other work that shared the machine's cores")
		}
		fmt.Fprintf(&b, ". A fleet on hosts of its own spends %.1f ms of CPU per broker on it (the probes' publishing included).", r.ClientCPUms/float64(r.Brokers))
	case master >= 0.75:
		b.WriteString("Redis set the pace.")
	default:
		b.WriteString("neither was saturated.")
	}
	b.WriteString("\n\n")
	return b.String()
}

// fleetShrinkNote says, when a fleet size runs with fewer channels per
// broker than another, what the larger count would cost there: the
// resubscribe's CPU per channel of this run's shardcast row with the most
// channels, scaled. Empty when every size has the same channels.
func fleetShrinkNote(results []fleetResult, nMasters int) string {
	var base *fleetResult
	for i, r := range results {
		if r.Engine == "shardcast-cluster" && r.Error == "" && (base == nil || r.Channels > base.Channels) {
			base = &results[i]
		}
	}
	if base == nil {
		return ""
	}
	total := float64(base.Brokers * base.Channels)
	redisPer := base.RedisCPUms / total                       // ms per channel
	clientPer := (base.ClientCPUms - base.ProbeCPUms) / total // ms per channel
	var b strings.Builder
	for _, r := range results {
		if r.Engine != base.Engine || r.Error != "" || r.Channels >= base.Channels {
			continue
		}
		n := float64(r.Brokers * base.Channels)
		cores := float64(runtime.NumCPU())
		redis, all := redisPer*n/1000, (redisPer+clientPer)*n/1000
		fmt.Fprintf(&b, "At %d brokers each broker holds %d channels, not %d. In this run the %d × %d storm cost Redis %.1f µs and the "+
			"client %.1f µs of CPU per channel (the probes' publishing left out of the client's), so %d × %d = %.0f channels would need "+
			"%.1f s of Redis CPU (%.1f s on each master with a core of its own each and a perfectly even load) and %.1f s with the "+
			"client's; on this machine's %.0f cores that is at least %.1f s for Redis alone and %.1f s for both",
			r.Brokers, r.Channels, base.Channels, base.Brokers, base.Channels, 1000*redisPer, 1000*clientPer, r.Brokers, base.Channels, n,
			redis, redis/float64(nMasters), all, cores, redis/cores, all/cores)
		switch {
		case redis/float64(nMasters) > 2:
			b.WriteString(": more than the 2 s target whatever the client does, even on a host with a core per master")
		case redis/cores > 2:
			b.WriteString(": more than the 2 s target here whatever the client does")
		case all/cores > 2:
			b.WriteString(": more than the 2 s target here with the client's work on the same cores")
		}
		fmt.Fprintf(&b, ". Memory is not what limits it: after subscribing, the process's live heap was %.0f MiB at %d × %d and %.0f MiB at "+
			"%d × %d, of this machine's %.0f GiB.", float64(base.HeapBytes)/(1<<20), base.Brokers, base.Channels, float64(r.HeapBytes)/(1<<20),
			r.Brokers, r.Channels, float64(memTotal())/(1<<30))
		if r.Brokers*r.Channels == base.Brokers*base.Channels {
			fmt.Fprintf(&b, " At %d × %d the fleet holds as many channels as the %d-broker one, over %.0f× its connections.", r.Brokers, r.Channels,
				base.Brokers, float64(r.Brokers)/float64(base.Brokers))
		}
		b.WriteString("\n\n")
	}
	return b.String()
}

// fleetTargets judges the largest fleet size: recovery within 2 s, and
// one subscribe connection per master per broker at every size. The
// recovery row also gives how long the storm's own CPU, the brokers' and
// Redis's, keeps the machine's cores busy: how near the recovery time is
// to what this host can do at all, however the work were spread.
func fleetTargets(results []fleetResult, servers []string, sizes []int, cores int) []target {
	largest := slices.Max(sizes)
	var big *fleetResult
	var others, conns []string
	connsOK := true
	for i, r := range results {
		if r.Engine != "shardcast-cluster" || !slices.Contains(sizes, r.Brokers) {
			continue
		}
		if r.Error != "" {
			connsOK = false
			conns = append(conns, fmt.Sprintf("error at %d brokers", r.Brokers))
			continue
		}
		if r.Brokers == largest && big == nil {
			big = &results[i]
		} else {
			others = append(others, fmt.Sprintf("%d × %d: %.3fs", r.Brokers, r.Channels, r.RecoverSecs))
		}
		for _, s := range servers {
			if r.SubConns[s] != r.Brokers || r.SubConnsAfter[s] != r.Brokers {
				connsOK = false
			}
		}
		conns = append(conns, fmt.Sprintf("%s before, %s after, for %d brokers", perMasterInts(r.SubConns, servers), perMasterInts(r.SubConnsAfter, servers), r.Brokers))
	}
	if big == nil {
		return nil
	}
	got := fmt.Sprintf("%.3fs (%d × %d channels)", big.RecoverSecs, big.Brokers, big.Channels)
	if cpu := big.ClientCPUms + big.RedisCPUms; cpu > 0 && cores > 0 {
		got += fmt.Sprintf("; its CPU (client %.2fs, Redis %.2fs) alone keeps this machine's %d cores busy %.2fs",
			big.ClientCPUms/1000, big.RedisCPUms/1000, cores, cpu/1000/float64(cores))
	}
	if len(others) > 0 {
		got += "; " + strings.Join(others, "; ")
	}
	return []target{
		{fmt.Sprintf("fleet: every channel of all %d brokers delivering again within 2 s of CLIENT KILL TYPE pubsub", largest), got, metStr(big.RecoverSecs <= 2)},
		{"fleet: 1 subscribe connection per master per broker, before and after the storm", strings.Join(conns, "; "), metStr(connsOK)},
	}
}
