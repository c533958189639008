package brokertest

import (
	"context"

	"github.com/shardcast/shardcast"
)

// faulty wraps a real broker and replaces the calls whose func field is
// set; the others, Stats included, go to the real broker.
type faulty struct {
	inner       shardcast.Broker
	publish     func(ctx context.Context, channel string, payload []byte) error
	subscribe   func(ctx context.Context, channels ...string) error
	unsubscribe func(ctx context.Context, channels ...string) error
	stats       func() shardcast.Stats
}

var (
	_ shardcast.Broker = (*faulty)(nil)
	_ StatsReporter    = (*faulty)(nil)
)

func (f *faulty) Publish(ctx context.Context, channel string, payload []byte) error {
	if f.publish != nil {
		return f.publish(ctx, channel, payload)
	}
	return f.inner.Publish(ctx, channel, payload)
}

func (f *faulty) Subscribe(ctx context.Context, channels ...string) error {
	if f.subscribe != nil {
		return f.subscribe(ctx, channels...)
	}
	return f.inner.Subscribe(ctx, channels...)
}

func (f *faulty) Unsubscribe(ctx context.Context, channels ...string) error {
	if f.unsubscribe != nil {
		return f.unsubscribe(ctx, channels...)
	}
	return f.inner.Unsubscribe(ctx, channels...)
}

func (f *faulty) Close() error { return f.inner.Close() }

func (f *faulty) Stats() shardcast.Stats {
	if f.stats != nil {
		return f.stats()
	}
	return f.inner.(StatsReporter).Stats()
}

// breakOptions returns a Harness whose brokers get the options fix makes
// of what the check asked for.
func breakOptions(base Harness, fix func(shardcast.Options) shardcast.Options) Harness {
	h := base
	h.New = func(t T, opts shardcast.Options) shardcast.Broker { return base.New(t, fix(opts)) }
	return h
}

// breakCalls returns a Harness whose brokers are the real ones wrapped by
// wrap, which sets the faulty calls. opts are the options the check asked
// for.
func breakCalls(base Harness, wrap func(t T, f *faulty, opts shardcast.Options)) Harness {
	h := base
	h.New = func(t T, opts shardcast.Options) shardcast.Broker {
		f := &faulty{inner: base.New(t, opts)}
		wrap(t, f, opts)
		return f
	}
	return h
}

// breakHandler returns a Harness whose subscribing brokers get the
// Handler wrap makes of the check's; opts are the check's options.
func breakHandler(base Harness, wrap func(h shardcast.Handler, opts shardcast.Options) shardcast.Handler) Harness {
	return breakOptions(base, func(o shardcast.Options) shardcast.Options {
		if o.Handler != nil {
			o.Handler = wrap(o.Handler, o)
		}
		return o
	})
}

// breakErrors returns a Harness whose brokers return what change makes
// of the errors (nil included) of Publish, Subscribe and Unsubscribe.
func breakErrors(base Harness, change func(error) error) Harness {
	return breakCalls(base, func(_ T, f *faulty, _ shardcast.Options) {
		f.publish = func(ctx context.Context, ch string, p []byte) error { return change(f.inner.Publish(ctx, ch, p)) }
		f.subscribe = func(ctx context.Context, chs ...string) error { return change(f.inner.Subscribe(ctx, chs...)) }
		f.unsubscribe = func(ctx context.Context, chs ...string) error { return change(f.inner.Unsubscribe(ctx, chs...)) }
	})
}
