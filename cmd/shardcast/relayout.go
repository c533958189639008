package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/cluster"
	"github.com/shardcast/shardcast/sharded"
)

// runRelayout moves the running brokers of an application to a new
// layout, or aborts the re-layout under way: a sharded application to a
// new instance list (sharded.Relayout), a cluster one to a new partition
// count and/or prefix (cluster.Relayout).
func runRelayout(ctx context.Context, args []string, io stdio) error {
	var (
		t          target
		control    string
		app        string
		heartbeat  time.Duration
		abort      bool
		partitions int
		prefix     string
	)
	fs := newFlagSet("relayout", "-shards a,b,c -control host:port | -cluster seeds [-partitions N] [-prefix P]; [-app name] [-abort]")
	t.register(fs)
	fs.IntVar(&partitions, "partitions", 0, "cluster: the new partition count (a power of two, 16 to 4096; default: keep the recorded one)")
	fs.StringVar(&prefix, "prefix", "", "cluster: the new channel prefix (default: keep the recorded one)")
	fs.StringVar(&control, "control", "", "the instance that holds the layout record (required with -shards: the first of the brokers' current list)")
	fs.StringVar(&app, "app", "", "Agreement.App of the application")
	fs.DurationVar(&heartbeat, "heartbeat", shardcast.DefaultHeartbeat, "the brokers' Agreement.Heartbeat (paces the polls)")
	fs.BoolVar(&abort, "abort", false, "abort the re-layout under way instead")
	if err := parseFlags(fs, args, io.out); err != nil {
		return err
	}
	if err := t.check(true); err != nil {
		return usageErr(fs, err)
	}
	if fs.NArg() > 0 {
		return usageErrorf(fs, "takes no arguments, got %q", fs.Args())
	}
	if t.cluster != "" && control != "" {
		return usageErrorf(fs, "-control is for a sharded application (-shards); a cluster's record lives on the cluster")
	}
	if control != "" {
		if _, err := shardcast.ParseAddr(control, shardcast.ConnOptions{}); err != nil {
			return usageErr(fs, fmt.Errorf("-control: %w", err))
		}
	}
	printPhase := func(p shardcast.RelayoutPhaseReport) {
		fmt.Fprintf(io.out, "phase %-7s done in %v by %d live broker(s)", p.Phase, p.Took.Round(time.Millisecond), p.Brokers)
		if p.Barriers > 0 {
			fmt.Fprintf(io.out, ", %d barrier(s) sent", p.Barriers)
		}
		fmt.Fprintln(io.out)
	}
	if t.cluster != "" {
		prefixSet := false
		fs.Visit(func(f *flag.Flag) { prefixSet = prefixSet || f.Name == "prefix" })
		if !abort && partitions == 0 && !prefixSet {
			return usageErrorf(fs, "give -partitions and/or -prefix with the new layout")
		}
		return relayoutCluster(ctx, t, io, partitions, prefix, prefixSet, abort,
			shardcast.Agreement{App: app, Heartbeat: heartbeat}, printPhase)
	}
	if partitions != 0 || prefix != "" {
		return usageErrorf(fs, "-partitions and -prefix are for a cluster application (-cluster)")
	}
	if control == "" {
		return usageErrorf(fs, "give -control host:port, the instance that holds the layout record")
	}
	if !abort && t.shards == "" {
		return usageErrorf(fs, "give -shards with the new instance list")
	}
	conn, err := t.conn(io.getenv)
	if err != nil {
		return err
	}
	cfg := sharded.RelayoutConfig{
		ControlAddr: control, Conn: conn, To: t.instances(),
		Agreement: shardcast.Agreement{App: app, Heartbeat: heartbeat},
		OnPhase:   printPhase,
	}
	if abort {
		if err := sharded.AbortRelayout(ctx, cfg); err != nil {
			return err
		}
		fmt.Fprintln(io.out, "re-layout aborted; every live broker is back on the recorded list")
		return nil
	}
	rep, err := sharded.Relayout(ctx, cfg)
	if err != nil {
		return err
	}
	fmt.Fprintf(io.out, "re-layout %s done: %s -> %s\n", rep.ID, rep.From.Description, rep.To.Description)
	return nil
}

// relayoutCluster is runRelayout for a cluster application.
func relayoutCluster(ctx context.Context, t target, io stdio, partitions int, prefix string, prefixSet, abort bool,
	a shardcast.Agreement, onPhase func(shardcast.RelayoutPhaseReport)) error {
	conn, err := t.conn(io.getenv)
	if err != nil {
		return err
	}
	cfg := cluster.RelayoutConfig{Addrs: t.seeds(), Conn: conn, Agreement: a, Partitions: partitions, OnPhase: onPhase}
	if prefixSet {
		cfg.Prefix = &prefix
	}
	if abort {
		if err := cluster.AbortRelayout(ctx, cfg); err != nil {
			return err
		}
		fmt.Fprintln(io.out, "re-layout aborted; every live broker is back on the recorded layout")
		return nil
	}
	rep, err := cluster.Relayout(ctx, cfg)
	if err != nil {
		return err
	}
	fmt.Fprintf(io.out, "re-layout %s done: %s -> %s\n", rep.ID, rep.From.Description, rep.To.Description)
	return nil
}
