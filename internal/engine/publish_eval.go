package engine

import (
	"context"

	"github.com/shardcast/shardcast"
)

// Eval checks channel and runs script s where channel's publishes go, with
// keys as KEYS and args as ARGV, and returns the script's reply. During a
// re-layout a moving channel's script counts in its routing's in-flight
// count until answered, as its publishes do.
func (p *Publisher[R, D]) Eval(ctx context.Context, channel string, s *shardcast.Script, keys []string, args ...string) (any, error) {
	if err := p.core.CheckChannel(ctx, channel); err != nil {
		return nil, err
	}
	d, pinned := p.dest(channel)
	v, err := p.route.EvalAt(ctx, d, channel, s, keys, args)
	if pinned != nil {
		pinned.Add(-1)
	}
	return v, err
}
