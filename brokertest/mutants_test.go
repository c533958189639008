package brokertest

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/shardcast/shardcast"
)

// mutant is a broker with one property of the contract broken on purpose,
// and the check that must catch it.
type mutant struct {
	name  string
	check string // the check that must fail
	want  string // a phrase the check's report must contain
	build func(base Harness) Harness
}

var mutants = []mutant{
	{
		name: "handler called twice per message", check: "DeliveryOnManyChannels",
		want: "other than exactly their two messages",
		build: func(base Harness) Harness {
			return breakHandler(base, func(h shardcast.Handler, _ shardcast.Options) shardcast.Handler {
				return func(m shardcast.Message) { h(m); h(m) }
			})
		},
	},
	{
		name: "Subscribe returns before subscribing", check: "DeliveryOnManyChannels",
		want:  "have not delivered it",
		build: lateSubscribe,
	},
	{
		name: "deliveries swapped in pairs", check: "PerChannelOrder",
		want: "out of order",
		build: func(base Harness) Harness {
			return breakHandler(base, func(h shardcast.Handler, _ shardcast.Options) shardcast.Handler {
				var mu sync.Mutex
				held := make(map[string]shardcast.Message)
				return func(m shardcast.Message) {
					mu.Lock()
					prev, ok := held[m.Channel]
					if !ok {
						held[m.Channel] = m
					} else {
						delete(held, m.Channel)
					}
					mu.Unlock()
					if ok {
						h(m)
						h(prev)
					}
				}
			})
		},
	},
	{
		name: "subscriptions counted: one Unsubscribe per Subscribe", check: "Idempotent",
		want:  "still delivered after one Unsubscribe",
		build: refcounted,
	},
	{
		name: "Unsubscribe does nothing", check: "UnsubscribeStopsDelivery",
		want: "published after Unsubscribe returned",
		build: func(base Harness) Harness {
			return breakCalls(base, func(_ T, f *faulty, _ shardcast.Options) {
				f.unsubscribe = func(context.Context, ...string) error { return nil }
			})
		},
	},
	{
		name: "ErrClosed swallowed", check: "CallsAfterClose",
		want: "after Close returned <nil>",
		build: func(base Harness) Harness {
			return breakErrors(base, func(err error) error {
				if errors.Is(err, shardcast.ErrClosed) {
					return nil
				}
				return err
			})
		},
	},
	{
		name: "publish-only broker accepts Subscribe", check: "PublishOnly",
		want: "Subscribe on a broker without Handler returned <nil>",
		build: func(base Harness) Harness {
			return breakCalls(base, func(_ T, f *faulty, opts shardcast.Options) {
				if opts.Handler == nil {
					f.subscribe = func(context.Context, ...string) error { return nil }
				}
			})
		},
	},
	{
		name: "refused Subscribe subscribes its valid channels", check: "BadInputChangesNothing",
		want: "failed yet changed something",
		build: func(base Harness) Harness {
			return breakCalls(base, func(_ T, f *faulty, _ shardcast.Options) {
				f.subscribe = func(ctx context.Context, chs ...string) error {
					err := f.inner.Subscribe(ctx, chs...)
					if errors.Is(err, shardcast.ErrInvalidChannel) {
						valid := slices.DeleteFunc(slices.Clone(chs), func(ch string) bool { return ch == "" })
						if len(valid) > 0 {
							_ = f.inner.Subscribe(context.Background(), valid...)
						}
					}
					return err
				}
			})
		},
	},
	{
		name: "errors lose their sentinel", check: "BadInputChangesNothing",
		want: "want an error matching",
		build: func(base Harness) Harness {
			return breakErrors(base, func(err error) error {
				if err == nil {
					return nil
				}
				return errors.New(err.Error())
			})
		},
	},
	{
		name: "Unsubscribe lands after the next Subscribe of its channel", check: "ConcurrentCallsEndInLastCallState",
		want:  "last call was subscribe=",
		build: deferredUnsubscribe,
	},
	{
		name: "EventInterrupted hidden", check: "InterruptedThenRestored",
		want: "without an EventInterrupted naming them first",
		build: func(base Harness) Harness {
			return breakOptions(base, func(o shardcast.Options) shardcast.Options {
				if on := o.OnEvent; on != nil {
					o.OnEvent = func(ev shardcast.Event) {
						if ev.Kind != shardcast.EventInterrupted {
							on(ev)
						}
					}
				}
				return o
			})
		},
	},
	{
		name: "PublishedAt zeroed", check: "PublishedAt",
		want: "want between the Publish call",
		build: func(base Harness) Harness {
			return breakHandler(base, func(h shardcast.Handler, _ shardcast.Options) shardcast.Handler {
				return func(m shardcast.Message) { m.PublishedAt = time.Time{}; h(m) }
			})
		},
	},
	{
		name: "PublishedAt set in Raw mode", check: "PublishedAt",
		want: "Raw mode: PublishedAt",
		build: func(base Harness) Harness {
			return breakHandler(base, func(h shardcast.Handler, o shardcast.Options) shardcast.Handler {
				if !o.Raw {
					return h
				}
				return func(m shardcast.Message) { m.PublishedAt = time.Now(); h(m) }
			})
		},
	},
	{
		name: "Stats counts Subscribe arguments, not channels", check: "Stats",
		want: "Stats().Channels",
		build: func(base Harness) Harness {
			return breakCalls(base, func(_ T, f *faulty, _ shardcast.Options) {
				var n int
				var mu sync.Mutex
				f.subscribe = func(ctx context.Context, chs ...string) error {
					err := f.inner.Subscribe(ctx, chs...)
					if err == nil {
						mu.Lock()
						n += len(chs)
						mu.Unlock()
					}
					return err
				}
				f.unsubscribe = func(ctx context.Context, chs ...string) error {
					err := f.inner.Unsubscribe(ctx, chs...)
					if err == nil {
						mu.Lock()
						n = max(0, n-len(chs))
						mu.Unlock()
					}
					return err
				}
				f.stats = func() shardcast.Stats {
					st := f.inner.(StatsReporter).Stats()
					mu.Lock()
					st.Channels = n
					mu.Unlock()
					return st
				}
			})
		},
	},
}

// lateSubscribe: Subscribe returns at once and subscribes only after some
// broker of the harness published, so the first message is always lost.
func lateSubscribe(base Harness) Harness {
	published := make(chan struct{})
	var once sync.Once
	return breakCalls(base, func(t T, f *faulty, _ shardcast.Options) {
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		// Registered after the real broker's Close, so it runs first.
		t.Cleanup(func() { cancel(); wg.Wait() })
		f.publish = func(ctx context.Context, ch string, p []byte) error {
			err := f.inner.Publish(ctx, ch, p)
			if err == nil {
				once.Do(func() { close(published) })
			}
			return err
		}
		f.subscribe = func(_ context.Context, chs ...string) error {
			wg.Go(func() {
				select {
				case <-published:
					_ = f.inner.Subscribe(ctx, chs...)
				case <-ctx.Done():
				}
			})
			return nil
		}
	})
}

// refcounted: each Subscribe of a channel must be matched by an
// Unsubscribe before the channel goes.
func refcounted(base Harness) Harness {
	return breakCalls(base, func(_ T, f *faulty, _ shardcast.Options) {
		var mu sync.Mutex
		refs := make(map[string]int)
		f.subscribe = func(ctx context.Context, chs ...string) error {
			err := f.inner.Subscribe(ctx, chs...)
			if err == nil {
				mu.Lock()
				for _, ch := range chs {
					refs[ch]++
				}
				mu.Unlock()
			}
			return err
		}
		f.unsubscribe = func(ctx context.Context, chs ...string) error {
			var last []string
			mu.Lock()
			for _, ch := range chs {
				if refs[ch] > 0 {
					refs[ch]--
					if refs[ch] == 0 {
						last = append(last, ch)
					}
				}
			}
			mu.Unlock()
			if len(last) == 0 {
				return nil
			}
			return f.inner.Unsubscribe(ctx, last...)
		}
	})
}

// deferredUnsubscribe: Unsubscribe returns at once and takes effect only
// after the next Subscribe of the same channel: calls for one channel no
// longer take effect in call order.
func deferredUnsubscribe(base Harness) Harness {
	return breakCalls(base, func(_ T, f *faulty, _ shardcast.Options) {
		var mu sync.Mutex
		pending := make(map[string]bool)
		f.subscribe = func(ctx context.Context, chs ...string) error {
			mu.Lock()
			defer mu.Unlock()
			if err := f.inner.Subscribe(ctx, chs...); err != nil {
				return err
			}
			var late []string
			for _, ch := range chs {
				if pending[ch] {
					late = append(late, ch)
					delete(pending, ch)
				}
			}
			if len(late) == 0 {
				return nil
			}
			return f.inner.Unsubscribe(ctx, late...)
		}
		f.unsubscribe = func(_ context.Context, chs ...string) error {
			mu.Lock()
			defer mu.Unlock()
			for _, ch := range chs {
				pending[ch] = true
			}
			return nil
		}
	})
}
