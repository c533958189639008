package cluster

import (
	"context"
	"fmt"

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
	if cfg.Partitions != 0 {
		if _, err := shardcast.NewLayout(cfg.Partitions, ""); err != nil {
			return shardcast.RelayoutReport{}, err
		}
	}
	return relayout.Relayout(ctx, cfg.Agreement, cfg.OnPhase, func(context.Context) (relayout.Mover, error) {
		return openCoordinator(cfg)
	})
}

// AbortRelayout returns the brokers of a re-layout under way to the old
// layout and waits until all acknowledged, bounded by ctx. It fails when
// none is under way (an error wrapping shardcast.ErrNoRelayout) or it
// began to finish.
func AbortRelayout(ctx context.Context, cfg RelayoutConfig) error {
	return relayout.AbortRelayout(ctx, cfg.Agreement, func(context.Context) (relayout.Mover, error) {
		return openCoordinator(cfg)
	})
}

// coordinator is the cluster engine's side of a Relayout or AbortRelayout
// run (relayout.Mover): a publish-only broker of its own (the agreement
// off), which runs the agreement's scripts and SPUBLISHes the barriers.
// ReadLayout runs the scripts only.
type coordinator struct {
	b *Broker
	// partitions and prefix are cfg's: the layout to move to, 0 and nil
	// keeping the recorded count and prefix.
	partitions int
	prefix     *string
}

var _ relayout.Mover = (*coordinator)(nil)

func openCoordinator(cfg RelayoutConfig) (*coordinator, error) {
	// Sized for every partition number, so that it has a route to each
	// partition of any layout.
	b, err := New(Config{Addrs: cfg.Addrs, Conn: cfg.Conn, Partitions: bankSize, Agreement: shardcast.Agreement{Off: true}})
	if err != nil {
		return nil, err
	}
	return &coordinator{b: b, partitions: cfg.Partitions, prefix: cfg.Prefix}, nil
}

// Run runs an agreement script on the master of partition 0's slot, where
// the record lives, bounded by Conn.CommandTimeout.
func (c *coordinator) Run(ctx context.Context, s *shardcast.Script, keys, args []string) (any, error) {
	ctx, cancel := context.WithTimeout(ctx, c.b.cfg.Conn.CommandTimeout)
	defer cancel()
	return c.b.evalPartition(ctx, 0, s, keys, args, true)
}

// Target returns the record of the recorded layout with the partition
// count and prefix the run changes; it refuses a record that is not a
// cluster engine's.
func (c *coordinator) Target(from shardcast.LayoutRecord) (shardcast.LayoutRecord, error) {
	if from.Engine != "cluster" {
		return shardcast.LayoutRecord{}, fmt.Errorf("%w: the layout record holds a %s engine's layout (%s)", shardcast.ErrInvalidConfig, from.Engine, from.Description)
	}
	parts, prefix := from.Partitions, from.Prefix
	if c.partitions != 0 {
		parts = c.partitions
	}
	if c.prefix != nil {
		prefix = *c.prefix
	}
	to, err := shardcast.NewLayout(parts, prefix)
	if err != nil {
		return shardcast.LayoutRecord{}, err
	}
	return layoutRecord(to), nil
}

// Barriers returns an SPUBLISH of t's barrier on each of from's
// partitions that lose channels. A barrier goes under the partition's own
// tag, so it travels to the partition's master and, on every subscriber,
// down the connection that carries the partition's messages, after every
// one published before it.
func (c *coordinator) Barriers(from shardcast.LayoutRecord, t *agreement.Transition) ([]relayout.Barrier, error) {
	old, err := shardcast.NewLayout(from.Partitions, from.Prefix)
	if err != nil {
		return nil, err
	}
	to, err := shardcast.NewLayout(t.ToRecord.Partitions, t.ToRecord.Prefix)
	if err != nil {
		return nil, err
	}
	var out []relayout.Barrier
	for _, p := range losing(old, to) {
		out = append(out, func(ctx context.Context) error {
			return c.b.send(ctx, p, old.PartitionKey(p, ""), t.Barrier, []byte(t.ID))
		})
	}
	return out, nil
}

// Close closes the coordinator's broker.
func (c *coordinator) Close() { _ = c.b.Close() }
