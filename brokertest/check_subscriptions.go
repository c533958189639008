package brokertest

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"

	"github.com/shardcast/shardcast"
)

// checkIdempotent: subscribing a channel again (in one call or in several)
// neither fails nor delivers twice, one Unsubscribe ends it however often
// it was subscribed, and unsubscribing again, or a channel never
// subscribed, is not an error.
func checkIdempotent(t T, h Harness) {
	r := newRig(t, h, shardcast.Options{})
	const a, b = "idem:a", "idem:b"
	r.subscribe(a, a)
	r.subscribe(a)
	r.subscribe(a, b)
	r.publish(a, "1")
	r.publish(a, "end")
	waitFor(t, h, "the last message on "+a, func() (bool, string) {
		return r.got.has(a, "end"), fmt.Sprintf("received %q", r.got.payloads(a))
	})
	if got := r.got.payloads(a); !slices.Equal(got, []string{"1", "end"}) {
		t.Errorf("channel subscribed by three calls delivered %q, want each message once: [\"1\" \"end\"]", got)
	}

	r.unsubscribe(a)
	if leaked := r.notSubscribed([]string{a}, "once"); len(leaked) > 0 {
		t.Errorf("channel subscribed by three calls still delivered after one Unsubscribe")
	}
	r.unsubscribe(a, a)
	r.unsubscribe(a)
	r.unsubscribe("idem:never-subscribed")
	if leaked := r.notSubscribed([]string{a}, "twice"); len(leaked) > 0 {
		t.Errorf("channel still delivered after repeated Unsubscribe calls")
	}
	r.stillSubscribed([]string{b}, "other channel")
}

// checkUnsubscribeStopsDelivery: once Unsubscribe returned, messages
// published on its channels are not delivered, and the other channels
// keep delivering.
func checkUnsubscribeStopsDelivery(t T, h Harness) {
	r := newRig(t, h, shardcast.Options{})
	chans := names("unsub:", 64)
	r.subscribe(chans...)
	r.stillSubscribed(chans, "before")
	gone, kept := chans[:32], chans[32:]
	r.unsubscribe(gone...)
	r.stillSubscribed(kept, "kept")
	if leaked := r.notSubscribed(gone, "after"); len(leaked) > 0 {
		t.Errorf("%d of %d channels delivered a message published after Unsubscribe returned, e.g. %s",
			len(leaked), len(gone), list(leaked))
	}
}

// checkConcurrentCalls: Subscribe and Unsubscribe calls on shared channels
// run from many goroutines at once; calls naming one channel are ordered
// by the test (a lock per channel), other calls overlap freely. Afterwards
// each channel is subscribed, exactly once, if and only if the last call
// naming it was Subscribe.
func checkConcurrentCalls(t T, h Harness) {
	const (
		goroutines = 12
		rounds     = 30
		channels   = 32
	)
	r := newRig(t, h, shardcast.Options{})
	chans := names("flip:", channels)
	var (
		locks      [channels]sync.Mutex
		subscribed [channels]bool
	)
	ctx := r.ctx()
	errs := make([]error, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 9))
			for range rounds {
				// One to three distinct channels, locked in index order.
				var idx []int
				for range 1 + rng.IntN(3) {
					idx = append(idx, rng.IntN(channels))
				}
				slices.Sort(idx)
				idx = slices.Compact(idx)
				pick := make([]string, len(idx))
				for k, i := range idx {
					locks[i].Lock()
					pick[k] = chans[i]
				}
				on := rng.IntN(2) == 0
				var err error
				if on {
					err = r.sub.Subscribe(ctx, pick...)
				} else {
					err = r.sub.Unsubscribe(ctx, pick...)
				}
				for _, i := range idx {
					if err == nil {
						subscribed[i] = on
					}
					locks[i].Unlock()
				}
				if err != nil {
					errs[g] = fmt.Errorf("subscribe=%v %q: %w", on, pick, err)
					return
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		noError(t, err, "concurrent calls")
	}
	var on, off []string
	for i, ch := range chans {
		if subscribed[i] {
			on = append(on, ch)
		} else {
			off = append(off, ch)
		}
	}
	if sr, ok := r.sub.(StatsReporter); ok {
		if got := sr.Stats().Channels; got != len(on) {
			t.Errorf("Stats().Channels = %d after the calls, want %d (channels whose last call was Subscribe)", got, len(on))
		}
	}
	// Every channel gets "final"; the unsubscribed ones are then subscribed
	// and every channel gets "marker". A subscribed channel must show
	// exactly [final marker], an unsubscribed one exactly [marker].
	final := func(string) string { return "final" }
	marker := func(string) string { return "marker" }
	r.publishAll(chans, final)
	if len(off) > 0 {
		r.subscribe(off...)
	}
	r.publishAll(chans, marker)
	// A channel left in the wrong state may never see its marker: wait,
	// but report every channel's state either way.
	waitUntil(t, h, "the marker on every channel", r.delivered(chans, marker))
	for i, ch := range chans {
		want := []string{"marker"}
		if subscribed[i] {
			want = []string{"final", "marker"}
		}
		if got := r.got.payloads(ch); !slices.Equal(got, want) {
			t.Errorf("channel %q: last call was subscribe=%v, but it delivered %q, want %q",
				ch, subscribed[i], got, want)
		}
	}
}
