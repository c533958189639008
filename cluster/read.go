package cluster

import (
	"context"
	"fmt"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/crc16"
	"github.com/shardcast/shardcast/internal/pubconn"
)

// EvalRO runs the read-only script s (EVALSHA_RO) for channel, with keys
// as KEYS and args as ARGV, on the node the broker subscribes channel's
// partition on: with SubscribeOn Replicas or AllNodes often a replica,
// which then serves the read instead of the master, from what it has
// replicated so far (it may miss the last writes). With SubscribeOn
// Masters, during an online re-layout, and whenever that node cannot
// answer for the slot (unreachable, loading, no longer serving it), the
// script runs on the master as Eval runs it. The keys follow Eval's rule
// (ErrInvalidKey otherwise), and a script that writes fails on every
// node.
func (b *Broker) EvalRO(ctx context.Context, channel string, s *shardcast.Script, keys []string, args ...string) (any, error) {
	at, err := b.readerOf(channel, keys)
	if err != nil {
		return nil, err
	}
	return b.publisher.EvalRO(ctx, channel, at, s, keys, args)
}

// readerOf returns the connection EvalRO reads channel on when that is
// not its master's, checking that keys are in channel's slot.
func (b *Broker) readerOf(channel string, keys []string) (*pubconn.Pub, error) {
	v := b.view.Load()
	if v.next != nil || b.cfg.SubscribeOn == Masters {
		return nil, nil // Eval checks the keys
	}
	p := v.cur.Partition(channel)
	if err := checkKeys(channel, p, keys); err != nil {
		return nil, err
	}
	b.mu.Lock()
	var addr string
	if p < len(b.subs) && b.subs[p] != b.assign[p] {
		addr = b.subs[p]
	}
	b.mu.Unlock()
	if addr == "" {
		return nil, nil
	}
	return b.readers.For(b.cfg.subDialer(addr)), nil
}

// checkKeys fails with ErrInvalidKey unless there are keys and every one
// hashes to the slot of partition p, channel's.
func checkKeys(channel string, p int, keys []string) error {
	if len(keys) == 0 {
		return fmt.Errorf("%w: Eval needs at least one key, in the slot of channel %q", ErrInvalidKey, channel)
	}
	for _, k := range keys {
		if crc16.Slot(k) != wide.Slot(p) {
			return fmt.Errorf("%w: key %q is not in the slot of channel %q (%d)", ErrInvalidKey, k, channel, wide.Slot(p))
		}
	}
	return nil
}
