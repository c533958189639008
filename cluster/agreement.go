package cluster

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/agreement"
)

// joinLayout checks the broker's partition count and prefix against the
// layout record in the cluster and registers the broker there, with a
// heartbeat until Close (see shardcast.Agreement). The record's keys
// carry the hash tag of partition 0, so the scripts go through Eval with
// a channel of partition 0: on that master's publishing connection, with
// Eval's redirections and resends.
func (b *Broker) joinLayout() error {
	a := b.cfg.Agreement.WithDefaults()
	if a.Off {
		return nil
	}
	channel := firstChannelOf(b.layout, 0)
	m, err := agreement.Join(b.core.Ctx(), agreement.Config{
		Agreement: a,
		Run: func(ctx context.Context, s *shardcast.Script, keys, args []string) (any, error) {
			return b.Eval(ctx, channel, s, keys, args...)
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

// firstChannelOf returns the first of "0", "1", … in partition p of l.
// Jump hashing gives each name probability 1/Partitions, so the loop
// ends after about Partitions tries.
func firstChannelOf(l *shardcast.Layout, p int) string {
	for i := 0; ; i++ {
		if ch := strconv.Itoa(i); l.Partition(ch) == p {
			return ch
		}
	}
}
