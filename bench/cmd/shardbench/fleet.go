package main

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"github.com/shardcast/shardcast/bench/internal/engines"
)

// fleetSpec is one storm: an engine, its fleet size and each broker's
// channels.
type fleetSpec struct {
	engine   string
	brokers  int
	channels int
}

// runFleet holds fleets of brokers of one engine in one process, as
// fleets of server nodes would, each broker with channels of its own,
// kills every Pub/Sub connection on every master of a 3-master cluster
// and measures how the whole fleet recovers; once per fleet size.
func runFleet(ctx context.Context, e *env) (section, error) {
	sizes, chans, err := fleetSizes()
	if err != nil {
		return section{Name: "fleet", Title: "Fleet reconnect storm"}, err
	}
	sec := section{Name: "fleet", Title: fmt.Sprintf("Fleet reconnect storm (%s brokers)", joinInts(sizes, ", "))}
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
	for _, run := range fleetRuns(engineList([]string{"shardcast-cluster", "centrifuge-sharded"}), sizes, chans) {
		k, err := engines.Lookup(run.engine)
		if err != nil {
			return sec, err
		}
		if !k.Cluster {
			continue
		}
		progress("fleet: %s, %d brokers × %d channels …", run.engine, run.brokers, run.channels)
		r := fleetRun(ctx, k, servers, seeds, run.brokers, run.channels)
		r.Scenario, r.Engine, r.Brokers, r.Channels = "fleet", run.engine, run.brokers, run.channels
		emit(r)
		if r.Error != "" {
			progress("   error: %s", r.Error)
		} else {
			addr, pct := r.busiest()
			progress("   subscribed again in %.3fs, last probe in %.3fs, ssubscribe calls %v, busiest master %s at %.0f%% of a core over the storm, client CPU %.0fms (probes %.0fms, %d publishes)",
				r.ResubSecs, r.DeliverSecs, r.SsubPerMaster, addr, pct, r.ClientCPUms, r.ProbeCPUms, r.ProbePublishes)
		}
		results = append(results, r)
		if ctx.Err() != nil {
			return sec, ctx.Err()
		}
	}
	tbl := fleetTable(results, servers)
	show("fleet\n" + tbl)
	sec.Body = fleetText(results, servers, sizes) + tbl + "\n"
	sec.Targets, sec.TargetPrefix = fleetTargets(results, servers, sizes, runtime.NumCPU()), "fleet: "
	return sec, nil
}

// fleetSizes reads -fleet-brokers and -fleet-channels: one channel count
// for every size, or one per size.
func fleetSizes() (sizes, chans []int, err error) {
	if sizes, err = parseInts(cfg.fleetBrokers); err != nil || len(sizes) == 0 {
		return nil, nil, fmt.Errorf("-fleet-brokers %q: want a list of broker counts", cfg.fleetBrokers)
	}
	if chans, err = parseInts(cfg.fleetChannels); err != nil || (len(chans) != 1 && len(chans) != len(sizes)) {
		return nil, nil, fmt.Errorf("-fleet-channels %q: want one channel count, or one per -fleet-brokers entry (%d)", cfg.fleetChannels, len(sizes))
	}
	for len(chans) < len(sizes) {
		chans = append(chans, chans[0])
	}
	return sizes, chans, nil
}

// fleetRuns lists the storms: every shardcast engine at every size;
// Centrifuge at -fleet-cent-brokers only (it holds 128 subscribe
// connections per broker, each with rueidis's 1 MiB of buffers), with the
// first size's channels per broker; and, when that is not one of the
// sizes, shardcast once more at Centrifuge's size and channels, just
// before Centrifuge's rows, for a like-for-like comparison.
func fleetRuns(names []string, sizes, chans []int) []fleetSpec {
	centrifuge := func(n string) bool { return strings.HasPrefix(n, "centrifuge") }
	cent := fleetSpec{brokers: cfg.fleetCentBrokers, channels: chans[0]}
	if i := slices.Index(sizes, cent.brokers); i >= 0 {
		cent.channels = chans[i]
	}
	alike := slices.ContainsFunc(names, centrifuge) && !slices.Contains(sizes, cent.brokers)
	var out, extra []fleetSpec
	for _, n := range names {
		if centrifuge(n) {
			out = append(out, fleetSpec{n, cent.brokers, cent.channels})
			continue
		}
		for i, nb := range sizes {
			out = append(out, fleetSpec{n, nb, chans[i]})
		}
		if alike {
			extra = append(extra, fleetSpec{n, cent.brokers, cent.channels})
		}
	}
	if i := slices.IndexFunc(out, func(r fleetSpec) bool { return centrifuge(r.engine) }); i >= 0 {
		return slices.Concat(out[:i:i], extra, out[i:])
	}
	return append(out, extra...)
}

func joinInts(v []int, sep string) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, sep)
}
