package brokertest

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/shardcast/shardcast"
)

// rig is what most checks start from: a subscribing broker that records
// what it receives and the events it raises, and a publishing broker.
type rig struct {
	t      T
	h      Harness
	sub    shardcast.Broker
	pub    shardcast.Broker
	got    *collector
	events *EventLog
}

// newRig builds the subscriber with opts (Handler and OnEvent replaced by
// the rig's recorders) and a publish-only broker with the same Raw and
// MaxPayload.
func newRig(t T, h Harness, opts shardcast.Options) *rig {
	t.Helper()
	r := &rig{t: t, h: h, got: newCollector(), events: &EventLog{}}
	subOpts := opts
	subOpts.Handler, subOpts.OnEvent = r.got.handle, r.events.Add
	r.sub = h.New(t, subOpts)
	r.pub = h.New(t, shardcast.Options{Raw: opts.Raw, MaxPayload: opts.MaxPayload})
	return r
}

// ctx bounds one call by the harness timeout.
func (r *rig) ctx() context.Context { return boundedCtx(r.t, r.h) }

func boundedCtx(t T, h Harness) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), h.timeout())
	t.Cleanup(cancel)
	return ctx
}

// noError fails the check at once if err is not nil.
func noError(t T, err error, what string, args ...any) {
	t.Helper()
	if err != nil {
		t.Errorf("%s: unexpected error: %v", fmt.Sprintf(what, args...), err)
		t.FailNow()
	}
}

// subscribe subscribes the rig's subscriber, failing the check on error.
func (r *rig) subscribe(channels ...string) {
	r.t.Helper()
	noError(r.t, r.sub.Subscribe(r.ctx(), channels...), "Subscribe(%s)", list(channels))
}

// unsubscribe unsubscribes the rig's subscriber, failing the check on error.
func (r *rig) unsubscribe(channels ...string) {
	r.t.Helper()
	noError(r.t, r.sub.Unsubscribe(r.ctx(), channels...), "Unsubscribe(%s)", list(channels))
}

// publish publishes one message, failing the check on error.
func (r *rig) publish(channel, payload string) {
	r.t.Helper()
	noError(r.t, r.pub.Publish(r.ctx(), channel, []byte(payload)), "Publish(%q)", channel)
}

// publishAll publishes payload(ch) on every channel from a few goroutines,
// so that the engine can batch them, and fails the check on any error.
func (r *rig) publishAll(channels []string, payload func(string) string) {
	r.t.Helper()
	const publishers = 8
	ctx := r.ctx()
	errs := make([]error, publishers)
	var wg sync.WaitGroup
	for w := range publishers {
		wg.Go(func() {
			for i := w; i < len(channels); i += publishers {
				if err := r.pub.Publish(ctx, channels[i], []byte(payload(channels[i]))); err != nil {
					errs[w] = fmt.Errorf("Publish(%q): %w", channels[i], err)
					return
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		noError(r.t, err, "publishing on %d channels", len(channels))
	}
}

// waitDelivered waits until every channel received payload(ch).
func (r *rig) waitDelivered(channels []string, payload func(string) string, what string) {
	r.t.Helper()
	waitFor(r.t, r.h, what, r.delivered(channels, payload))
}

// delivered is the condition that every channel received payload(ch).
func (r *rig) delivered(channels []string, payload func(string) string) func() (bool, string) {
	return func() (bool, string) {
		var missing []string
		for _, ch := range channels {
			if !r.got.has(ch, payload(ch)) {
				missing = append(missing, ch)
			}
		}
		return len(missing) == 0, fmt.Sprintf("%d of %d channels have not delivered it, e.g. %s",
			len(missing), len(channels), list(head(missing, 5)))
	}
}

// notSubscribed checks that the subscriber does not receive channels:
// it publishes a probe on each, then subscribes them and publishes a
// marker. Once every marker arrived, a probe that was delivered came
// before its marker on the same channel, so its absence is conclusive.
// The channels are subscribed afterwards. It returns the channels that
// delivered their probe.
func (r *rig) notSubscribed(channels []string, tag string) []string {
	r.t.Helper()
	probe := func(string) string { return "probe:" + tag }
	marker := func(string) string { return "marker:" + tag }
	r.publishAll(channels, probe)
	r.subscribe(channels...)
	r.publishAll(channels, marker)
	r.waitDelivered(channels, marker, "markers on channels subscribed again ("+tag+")")
	var leaked []string
	for _, ch := range channels {
		if r.got.has(ch, probe(ch)) {
			leaked = append(leaked, ch)
		}
	}
	return leaked
}

// stillSubscribed checks that channels still deliver: a message published
// now reaches every one of them.
func (r *rig) stillSubscribed(channels []string, tag string) {
	r.t.Helper()
	payload := func(string) string { return "still:" + tag }
	r.publishAll(channels, payload)
	r.waitDelivered(channels, payload, "channels that must still be subscribed to deliver ("+tag+")")
}

// waitFor polls cond until it holds, failing the check after the harness
// timeout with cond's last account of what is missing.
func waitFor(t T, h Harness, what string, cond func() (bool, string)) {
	t.Helper()
	if !waitUntil(t, h, what, cond) {
		t.FailNow()
	}
}

// waitUntil polls cond until it holds and reports whether it did; on
// timeout it reports the failure but lets the check go on.
func waitUntil(t T, h Harness, what string, cond func() (bool, string)) bool {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.NewTimer(h.timeout())
	defer deadline.Stop()
	for {
		ok, state := cond()
		if ok {
			return true
		}
		select {
		case <-tick.C:
		case <-deadline.C:
			t.Errorf("timed out after %v waiting for %s: %s", h.timeout(), what, state)
			return false
		case <-t.Context().Done():
			t.Errorf("test ended while waiting for %s: %s", what, state)
			return false
		}
	}
}

// names returns n distinct channel names with the given prefix.
func names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = prefix + strconv.Itoa(i)
	}
	return out
}

// list renders channel names for a failure message, the first few of a
// long list.
func list(channels []string) string {
	if len(channels) > 5 {
		return fmt.Sprintf("%q… (%d channels)", channels[:5], len(channels))
	}
	return fmt.Sprintf("%q", channels)
}

func head[E any](s []E, n int) []E {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// sortedSet returns the distinct values of s, sorted.
func sortedSet(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return slices.Compact(out)
}
