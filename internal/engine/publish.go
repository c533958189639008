package engine

import (
	"context"
	"strings"
	"sync/atomic"

	"github.com/shardcast/shardcast"
)

// PublishRoute is an engine's part of the publish path: where a channel's
// calls go under a routing R (the engine's channel map at one moment,
// replaced whole by an online re-layout) and how a call reaches a
// destination D. The Publisher does the rest, for both engines.
type PublishRoute[R, D any] interface {
	// Dest returns where a call for channel goes under r and, when channel
	// moves in the re-layout under way, r's count of such calls in flight
	// (nil otherwise).
	Dest(r *R, channel string) (d D, inflight *atomic.Int64)
	// ProbeDest returns where a delivery probe on channel goes: probes test
	// paths, whatever the layout.
	ProbeDest(channel string) D
	// SendTo publishes payload on channel at d and returns once answered,
	// with the error Publish returns.
	SendTo(ctx context.Context, d D, channel string, payload []byte) error
	// QueueTo hands call a's message to d's connection; on an error the
	// Publisher abandons a.
	QueueTo(ctx context.Context, a *AsyncCall, d D, channel string, payload []byte) error
	// AsyncFailed is the error done hears for a PublishAsync message that
	// failed at where (what QueueTo set with SetWhere).
	AsyncFailed(where string, err error) error
	// EvalAt checks keys and runs s at d, channel's destination.
	EvalAt(ctx context.Context, d D, channel string, s *shardcast.Script, keys, args []string) (any, error)
}

// Publisher is a broker's publish path: Publish, PublishAsync and Eval
// with their argument checks, counters and re-layout pins, over an
// engine's PublishRoute. Init it before the first call.
type Publisher[R, D any] struct {
	core   *Core
	routes *atomic.Pointer[R]
	route  PublishRoute[R, D]
	async  Async
}

// Init sets the broker's core, the routing in force (routes) and the
// engine's route.
func (p *Publisher[R, D]) Init(core *Core, routes *atomic.Pointer[R], route PublishRoute[R, D]) {
	p.core, p.routes, p.route = core, routes, route
	p.async.Init(core, route.AsyncFailed)
}

// Publish checks the call, sends it and counts it in Stats.Published once
// Redis accepted it.
func (p *Publisher[R, D]) Publish(ctx context.Context, channel string, payload []byte) error {
	if err := p.core.CheckPublish(ctx, channel, payload); err != nil {
		return err
	}
	if err := p.Send(ctx, channel, payload); err != nil {
		return err
	}
	p.core.Published()
	return nil
}

// Send is Publish without the argument check and the count: delivery
// probes are sent with it. During a re-layout, a publish of a moving
// channel counts in its routing's in-flight count until answered, so that
// the next step knows when none is left under the old routing.
func (p *Publisher[R, D]) Send(ctx context.Context, channel string, payload []byte) error {
	if strings.HasPrefix(channel, ProbeChannelPrefix) {
		return p.route.SendTo(ctx, p.route.ProbeDest(channel), channel, payload)
	}
	d, pinned := p.dest(channel)
	err := p.route.SendTo(ctx, d, channel, payload)
	if pinned != nil {
		pinned.Add(-1)
	}
	return err
}

// dest returns where a call for channel goes under the routing in force
// and, when channel moves, the in-flight count the call is pinned in (see
// Pin), which the caller decrements once the call ended.
func (p *Publisher[R, D]) dest(channel string) (D, *atomic.Int64) {
	for {
		r := p.routes.Load()
		d, inflight := p.route.Dest(r, channel)
		if inflight == nil || Pin(p.routes, r, inflight) {
			return d, inflight
		}
	}
}
