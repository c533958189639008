package cluster

import (
	"context"
	"fmt"
	"strings"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/agreement"
)

// joinLayout checks the broker's partition count and prefix against the
// layout record in the cluster and registers the broker there, with a
// heartbeat until Close (see shardcast.Agreement).
func (b *Broker) joinLayout() error {
	a := b.cfg.Agreement.WithDefaults()
	if a.Off {
		return nil
	}
	m, err := agreement.Join(b.core.Ctx(), agreement.Config{
		Agreement: a,
		Run: func(ctx context.Context, s *shardcast.Script, keys, args []string) (any, error) {
			return b.evalPartition(ctx, 0, s, keys, args, true)
		},
		Where: "the cluster of " + strings.Join(b.cfg.seeds, ", "),
		Ours: shardcast.LayoutRecord{
			Fingerprint: b.layout.Fingerprint(),
			Description: fmt.Sprintf("cluster: %d partitions, prefix %q", b.layout.Partitions(), b.layout.Prefix()),
			Engine:      "cluster",
			Partitions:  b.layout.Partitions(),
			Prefix:      b.layout.Prefix(),
		},
		Timeout: b.cfg.Conn.CommandTimeout,
		Emit:    b.core.Emitter.Emit,
		Log:     b.core.Log,
	})
	if err != nil {
		return err
	}
	b.member = m
	m.Start(b.core.Ctx(), b.core.Go)
	return nil
}
