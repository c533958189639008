package engine

import (
	"context"
	"strings"
	"sync/atomic"
)

// PublishAsync checks the call as Publish does, waits for room among the
// messages in flight (bounded by ctx and Close) and queues the message at
// its destination; done hears the outcome. During a re-layout a moving
// channel's message counts in its routing's in-flight count until done.
func (p *Publisher[R, D]) PublishAsync(ctx context.Context, channel string, payload []byte, done func(error)) error {
	a, err := p.async.Start(ctx, channel, payload, done)
	if err != nil {
		return err
	}
	var d D
	if strings.HasPrefix(channel, ProbeChannelPrefix) {
		d = p.route.ProbeDest(channel)
	} else {
		var pinned *atomic.Int64
		if d, pinned = p.dest(channel); pinned != nil {
			a.Count(pinned)
		}
	}
	if err := p.route.QueueTo(ctx, a, d, channel, payload); err != nil {
		a.Abandon()
		return err
	}
	return nil // a belongs to the connection until it finishes
}
