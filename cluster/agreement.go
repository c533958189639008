package cluster

import (
	"context"
	"fmt"
	"strings"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/agreement"
	"github.com/shardcast/shardcast/internal/relayout"
)

// joinLayout checks the broker's partition count and prefix against the
// layout record in the cluster and registers the broker there, with a
// heartbeat until Close (see shardcast.Agreement).
func (b *Broker) joinLayout() error {
	a := b.cfg.Agreement.WithDefaults()
	if a.Off {
		return nil
	}
	run := func(ctx context.Context, s *shardcast.Script, keys, args []string) (any, error) {
		return b.evalPartition(ctx, 0, s, keys, args, true)
	}
	var err error
	b.member, b.rel, err = relayout.Join(relayout.FollowerConfig{
		Agreement: a, Run: run, Core: b.core, Hand: b.hand, Engine: steps{b},
		BarrierTimeout: b.cfg.BarrierTimeout, Timeout: b.cfg.Conn.CommandTimeout,
	}, agreement.Config{
		Where: "the cluster of " + strings.Join(b.cfg.seeds, ", "),
		Ours:  layoutRecord(b.view.Load().cur),
	})
	return err
}

// layoutRecord describes l as the layout record holds it.
func layoutRecord(l *shardcast.Layout) shardcast.LayoutRecord {
	return shardcast.LayoutRecord{
		Fingerprint: l.Fingerprint(),
		Description: fmt.Sprintf("cluster: %d partitions, prefix %q", l.Partitions(), l.Prefix()),
		Engine:      "cluster",
		Partitions:  l.Partitions(),
		Prefix:      l.Prefix(),
	}
}

// follow returns s with the partition count and prefix of record r, which
// a running fleet uses (shardcast.Agreement.Follow).
func (s settings) follow(r shardcast.LayoutRecord) (settings, error) {
	if r.Engine != "cluster" {
		return s, fmt.Errorf("the record is the %s engine's, not a partition layout", r.Engine)
	}
	if _, err := shardcast.NewLayout(r.Partitions, r.Prefix); err != nil {
		return s, err
	}
	s.Partitions, s.Prefix = r.Partitions, r.Prefix
	return s, nil
}
