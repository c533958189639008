package brokertest

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/shardcast/shardcast"
)

// wantErr reports err unless it is target (errors.Is).
func wantErr(t T, err, target error, call string) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Errorf("%s returned %v, want an error matching %v (errors.Is)", call, err, target)
	}
}

// checkCallsAfterClose: every call after Close returns ErrClosed, on a
// subscriber and on a publish-only broker, and Close is idempotent.
func checkCallsAfterClose(t T, h Harness) {
	ctx := boundedCtx(t, h)
	sub := h.New(t, shardcast.Options{Handler: func(shardcast.Message) {}})
	noError(t, sub.Subscribe(ctx, "closed:a"), "Subscribe before Close")
	noError(t, sub.Close(), "Close")
	wantErr(t, sub.Publish(ctx, "closed:a", []byte("x")), shardcast.ErrClosed, "Publish after Close")
	wantErr(t, sub.Subscribe(ctx, "closed:a"), shardcast.ErrClosed, "Subscribe after Close")
	wantErr(t, sub.Subscribe(ctx, "closed:new"), shardcast.ErrClosed, "Subscribe of a new channel after Close")
	wantErr(t, sub.Unsubscribe(ctx, "closed:a"), shardcast.ErrClosed, "Unsubscribe after Close")
	if err := sub.Close(); err != nil {
		t.Errorf("second Close returned %v, want nil: Close is idempotent", err)
	}

	pub := h.New(t, shardcast.Options{})
	noError(t, pub.Publish(ctx, "closed:a", []byte("x")), "Publish before Close")
	noError(t, pub.Close(), "Close of a publish-only broker")
	wantErr(t, pub.Publish(ctx, "closed:a", []byte("x")), shardcast.ErrClosed, "Publish after Close (publish-only broker)")
	wantErr(t, pub.Subscribe(ctx, "closed:a"), shardcast.ErrClosed, "Subscribe after Close (publish-only broker)")
	if err := pub.Close(); err != nil {
		t.Errorf("second Close of a publish-only broker returned %v, want nil", err)
	}
}

// checkPublishOnly: a broker built without a Handler refuses Subscribe
// with ErrNoHandler, has nothing to unsubscribe, and publishes.
func checkPublishOnly(t T, h Harness) {
	r := newRig(t, h, shardcast.Options{})
	ctx := r.ctx()
	wantErr(t, r.pub.Subscribe(ctx, "pubonly:a"), shardcast.ErrNoHandler, "Subscribe on a broker without Handler")
	noError(t, r.pub.Unsubscribe(ctx, "pubonly:a"), "Unsubscribe on a broker without Handler")
	r.subscribe("pubonly:a")
	r.stillSubscribed([]string{"pubonly:a"}, "published by the publish-only broker")
}

// checkBadInput: an empty channel, a payload over MaxPayload and a
// cancelled context each get their sentinel error, and the call changes
// nothing: no channel of a refused Subscribe is subscribed, none of a
// refused Unsubscribe is unsubscribed, and a refused Publish delivers
// nothing.
func checkBadInput(t T, h Harness) {
	const limit = 16
	r := newRig(t, h, shardcast.Options{MaxPayload: limit})
	ctx := r.ctx()
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	channels := func() int {
		if sr, ok := r.sub.(StatsReporter); ok {
			return sr.Stats().Channels
		}
		return -1
	}

	// Empty channel names.
	wantErr(t, r.sub.Subscribe(ctx, "bad:ok", ""), shardcast.ErrInvalidChannel, `Subscribe("bad:ok", "")`)
	wantErr(t, r.sub.Subscribe(ctx, ""), shardcast.ErrInvalidChannel, `Subscribe("")`)
	wantErr(t, r.pub.Publish(ctx, "", []byte("x")), shardcast.ErrInvalidChannel, `Publish("")`)
	wantErr(t, r.sub.Publish(ctx, "", []byte("x")), shardcast.ErrInvalidChannel, `Publish("") on the subscriber`)
	if n := channels(); n > 0 {
		t.Errorf("Stats().Channels = %d after refused Subscribe calls, want 0", n)
	}
	if leaked := r.notSubscribed([]string{"bad:ok"}, "empty"); len(leaked) > 0 {
		t.Errorf(`Subscribe("bad:ok", "") failed yet changed something: "bad:ok" was subscribed`)
	}
	r.subscribe("bad:kept")
	before := channels()
	wantErr(t, r.sub.Unsubscribe(ctx, "bad:kept", ""), shardcast.ErrInvalidChannel, `Unsubscribe("bad:kept", "")`)
	if n := channels(); n != before {
		t.Errorf("Stats().Channels went from %d to %d on a refused Unsubscribe", before, n)
	}
	r.stillSubscribed([]string{"bad:kept"}, "k1") // payloads stay under the limit

	// Payload over the limit; the limit itself is allowed.
	r.subscribe("bad:size")
	wantErr(t, r.pub.Publish(ctx, "bad:size", make([]byte, limit+1)), shardcast.ErrPayloadTooLarge,
		fmt.Sprintf("Publish of %d bytes with MaxPayload %d", limit+1, limit))
	full := string(make([]byte, limit))
	r.publish("bad:size", full)
	r.publish("bad:size", "end")
	waitFor(t, h, "the accepted messages on bad:size", func() (bool, string) {
		return r.got.has("bad:size", "end"), fmt.Sprintf("received %q", r.got.payloads("bad:size"))
	})
	if got := r.got.payloads("bad:size"); !slices.Equal(got, []string{full, "end"}) {
		t.Errorf("bad:size delivered %q, want only the two accepted messages (the refused one changed something)", got)
	}

	// A cancelled context.
	wantErr(t, r.sub.Subscribe(cancelled, "bad:never"), context.Canceled, "Subscribe with a cancelled ctx")
	wantErr(t, r.pub.Publish(cancelled, "bad:size", []byte("cancelled")), context.Canceled, "Publish with a cancelled ctx")
	before = channels()
	wantErr(t, r.sub.Unsubscribe(cancelled, "bad:kept"), context.Canceled, "Unsubscribe with a cancelled ctx")
	if n := channels(); n != before {
		t.Errorf("Stats().Channels went from %d to %d on an Unsubscribe with a cancelled ctx", before, n)
	}
	if leaked := r.notSubscribed([]string{"bad:never"}, "cancelled"); len(leaked) > 0 {
		t.Errorf(`Subscribe("bad:never") with a cancelled ctx failed yet changed something: the channel was subscribed`)
	}
	r.stillSubscribed([]string{"bad:kept"}, "k2")
	r.publish("bad:size", "end2")
	waitFor(t, h, "the marker on bad:size", func() (bool, string) {
		return r.got.has("bad:size", "end2"), fmt.Sprintf("received %q", r.got.payloads("bad:size"))
	})
	if r.got.has("bad:size", "cancelled") {
		t.Errorf("a Publish with a cancelled ctx failed yet its message was delivered")
	}
}
