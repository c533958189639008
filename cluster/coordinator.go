package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/agreement"
	"github.com/shardcast/shardcast/internal/relayout"
)

// RelayoutConfig configures Relayout and AbortRelayout.
type RelayoutConfig struct {
	// Addrs are seed nodes of the cluster, as in Config.Addrs.
	Addrs []string
	// Agreement names the application (App); its Heartbeat is the
	// brokers' (default shardcast.DefaultHeartbeat) and paces the
	// coordinator's polls.
	Agreement shardcast.Agreement
	// Conn says how to reach the nodes (credentials, TLS, timeouts).
	Conn shardcast.ConnOptions
	// Partitions is the new partition count, one of
	// shardcast.SupportedPartitions() (0 keeps the recorded one).
	Partitions int
	// Prefix, if set, is the new channel prefix (nil keeps the recorded
	// one).
	Prefix *string
	// OnPhase, if set, is called as each phase completes.
	OnPhase func(shardcast.RelayoutPhaseReport)
}

// Relayout moves the running brokers of an application from the
// partition count and prefix in its layout record to those of cfg,
// without stopping them, and returns once the record holds the new
// layout (docs/RELAYOUT.md gives the protocol). Every channel whose wire
// key changes takes part (with a new prefix, every channel): every live
// broker subscribes it under the new layout too (prepare), then publishes
// it there (switch); the coordinator then SPUBLISHes a barrier on each
// old partition that loses channels, after which every subscriber has all
// their old messages and delivers the new ones it held back (drain);
// finally the record takes the new layout and brokers drop the old
// subscriptions (finish). Brokers that start meanwhile follow the phase
// they find; a broker whose registration expires is not waited for. No
// message is lost, duplicated or reordered by the move, short of a node
// or broker failing during it, which the brokers report.
//
// It fails before changing anything when cfg names an unsupported
// partition count (shardcast.ErrInvalidConfig), the recorded layout
// (shardcast.ErrSameLayout), when there is no record
// (shardcast.ErrNoLayoutRecord) or it is not a cluster engine's, when no
// seed answers, or when another re-layout is under way
// (shardcast.ErrRelayoutInProgress); one to the same layout is resumed.
// If ctx ends before the finish, it aborts: every broker returns to the
// old layout, and the error wraps shardcast.ErrRelayoutAborted.
// If the transition vanishes from the control instance (it lost its
// data), it returns at once with an error wrapping
// shardcast.ErrRelayoutVanished; the brokers follow the record they find.
func Relayout(ctx context.Context, cfg RelayoutConfig) (shardcast.RelayoutReport, error) {
	var rep shardcast.RelayoutReport
	if cfg.Partitions != 0 {
		if _, err := shardcast.NewLayout(cfg.Partitions, ""); err != nil {
			return rep, err
		}
	}
	c, err := openCoordinator(ctx, cfg)
	if err != nil {
		return rep, err
	}
	defer c.close()
	st, err := agreement.Read(ctx, c.Run, c.Agreement)
	if err != nil {
		return rep, err
	}
	if st.Record == nil {
		return rep, fmt.Errorf("%w in %s (App %q)", shardcast.ErrNoLayoutRecord, c.Agreement.RecordKey(), c.Agreement.App)
	}
	rep.From = *st.Record
	if st.Record.Engine != "cluster" {
		return rep, fmt.Errorf("%w: the layout record holds a %s engine's layout (%s)", shardcast.ErrInvalidConfig, st.Record.Engine, st.Record.Description)
	}
	parts, prefix := st.Record.Partitions, st.Record.Prefix
	if cfg.Partitions != 0 {
		parts = cfg.Partitions
	}
	if cfg.Prefix != nil {
		prefix = *cfg.Prefix
	}
	to, err := shardcast.NewLayout(parts, prefix)
	if err != nil {
		return rep, err
	}
	rep.To = layoutRecord(to)
	t, begun, err := c.Begin(ctx, rep.To, nil)
	if err != nil {
		begun.From = rep.From
		return begun, err
	}
	rep = begun
	from, err := shardcast.NewLayout(rep.From.Partitions, rep.From.Prefix)
	if err != nil {
		return rep, errors.Join(err, c.Abort(context.WithoutCancel(ctx), t, &rep))
	}
	barriers := func(ctx context.Context) int {
		return c.sendBarriers(ctx, losing(from, to), from, t)
	}
	return rep, c.Drive(ctx, t, &rep, barriers)
}

// AbortRelayout returns the brokers of a re-layout under way to the old
// layout and waits until all acknowledged, bounded by ctx. It fails when
// none is under way (an error wrapping shardcast.ErrNoRelayout) or it
// began to finish.
func AbortRelayout(ctx context.Context, cfg RelayoutConfig) error {
	c, err := openCoordinator(ctx, cfg)
	if err != nil {
		return err
	}
	defer c.close()
	return c.AbortCurrent(ctx)
}

// coordinator is one run of Relayout or AbortRelayout: the phase stepping
// over a publish-only broker of its own (the agreement off), which runs
// the agreement's scripts and SPUBLISHes the barriers.
type coordinator struct {
	relayout.Coordinator
	b *Broker
}

func openCoordinator(ctx context.Context, cfg RelayoutConfig) (*coordinator, error) {
	if err := relayout.CheckAgreement(cfg.Agreement); err != nil {
		return nil, err
	}
	// Sized for every partition number, so that it has a route to each
	// partition of any layout.
	b, err := New(Config{Addrs: cfg.Addrs, Conn: cfg.Conn, Partitions: bankSize, Agreement: shardcast.Agreement{Off: true}})
	if err != nil {
		return nil, fmt.Errorf("shardcast: relayout: %w", err)
	}
	a := cfg.Agreement.WithDefaults()
	c := &coordinator{b: b, Coordinator: relayout.Coordinator{
		Agreement: a, Name: relayout.NewName(), OnPhase: cfg.OnPhase,
		Run: func(ctx context.Context, s *shardcast.Script, keys, args []string) (any, error) {
			ctx, cancel := context.WithTimeout(ctx, b.cfg.Conn.CommandTimeout)
			defer cancel()
			return b.evalPartition(ctx, 0, s, keys, args, true)
		},
	}}
	return c, nil
}

// sendBarriers SPUBLISHes t's barrier on each of from's partitions in
// parts, all at once, and returns how many Redis accepted. A barrier goes
// under the partition's own tag, so it travels to the partition's master
// and, on every subscriber, down the connection that carries the
// partition's messages, after every one published before it. ctx bounds
// the sends (relayout.Coordinator gives them a quarter heartbeat).
func (c *coordinator) sendBarriers(ctx context.Context, parts []int, from *shardcast.Layout, t *agreement.Transition) int {
	var n atomic.Int64
	var wg sync.WaitGroup
	for _, p := range parts {
		wg.Go(func() {
			if c.b.send(ctx, p, from.PartitionKey(p, ""), t.Barrier, []byte(t.ID)) == nil {
				n.Add(1)
			}
		})
	}
	wg.Wait()
	return int(n.Load())
}

func (c *coordinator) close() { _ = c.b.Close() }
