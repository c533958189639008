package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/sharded"
)

// runRelayout moves the running brokers of a sharded application to a
// new instance list (sharded.Relayout), or aborts the re-layout under way.
func runRelayout(ctx context.Context, args []string, io stdio) error {
	var (
		t         target
		control   string
		app       string
		heartbeat time.Duration
		abort     bool
	)
	fs := newFlagSet("relayout", "-shards a,b,c [-control host:port] [-app name] [-abort]", io.err)
	t.register(fs)
	fs.StringVar(&control, "control", "", "the instance that holds the layout record (default: the first of the brokers' current list; required)")
	fs.StringVar(&app, "app", "", "Agreement.App of the application")
	fs.DurationVar(&heartbeat, "heartbeat", shardcast.DefaultHeartbeat, "the brokers' Agreement.Heartbeat (paces the polls)")
	fs.BoolVar(&abort, "abort", false, "abort the re-layout under way instead")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if t.cluster != "" {
		return errors.New("relayout: only the sharded engine (-shards) is supported so far")
	}
	if control == "" {
		return errors.New("relayout: give -control host:port, the instance that holds the layout record")
	}
	conn, err := t.conn(io.getenv)
	if err != nil {
		return err
	}
	cfg := sharded.RelayoutConfig{
		ControlAddr: control, Conn: conn, To: t.instances(),
		Agreement: shardcast.Agreement{App: app, Heartbeat: heartbeat},
		OnPhase: func(p sharded.PhaseReport) {
			fmt.Fprintf(io.out, "phase %-7s done in %v by %d live broker(s)", p.Phase, p.Took.Round(time.Millisecond), p.Brokers)
			if p.Barriers > 0 {
				fmt.Fprintf(io.out, ", %d barrier(s) sent", p.Barriers)
			}
			fmt.Fprintln(io.out)
		},
	}
	if abort {
		if err := sharded.AbortRelayout(ctx, cfg); err != nil {
			return err
		}
		fmt.Fprintln(io.out, "re-layout aborted; every live broker is back on the recorded list")
		return nil
	}
	if t.shards == "" {
		return errors.New("relayout: give -shards with the new instance list")
	}
	rep, err := sharded.Relayout(ctx, cfg)
	if err != nil {
		return err
	}
	fmt.Fprintf(io.out, "re-layout %s done: %s -> %s\n", rep.ID, rep.From.Description, rep.To.Description)
	return nil
}
