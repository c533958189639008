package sharded

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/redistest"
	"github.com/stretchr/testify/require"
)

// TestProbeLostWithItsConnection: a probe in flight when its subscribe
// connection dies is lost with it. The loss is reported by the connection
// drop (Interrupted, then Restored after the resubscribe); the stale probe
// is forgotten, not judged when its old deadline passes, which would
// report the healthy path silent and resubscribe it a second time.
func TestProbeLostWithItsConnection(t *testing.T) {
	srv := redistest.StartStandalone(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	pub := newBroker(t, Config{Addrs: addrs(srv)})
	proxy := redistest.StartProxy(t, srv.Addr())
	rec := newRecorder()
	var evs events
	sub := newBroker(t, Config{Addrs: []string{proxy.Addr()}, Agreement: sameServerOtherName,
		Options: shardcast.Options{Handler: rec.handle, OnEvent: evs.Add},
		Conn:    shardcast.ConnOptions{ProbeInterval: 100 * time.Millisecond, ProbeTimeout: 3 * time.Second}})
	require.NoError(t, sub.Subscribe(ctx, "watched"))
	time.Sleep(500 * time.Millisecond) // probes come and go

	// The connection dies with a probe in flight on it (the proxy holds the
	// probe's push back, as a dying socket would).
	proxy.DropPushes(func(kind, ch string) bool { return strings.HasPrefix(ch, shardcast.ProbeChannelPrefix) })
	waitFor(t, "a probe in flight", func() bool { return proxy.Dropped() > 0 })
	proxy.DropPushes(nil)
	_, err := srv.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub")
	require.NoError(t, err)
	killed := time.Now()
	waitFor(t, "the restore after the drop", func() bool { return len(evs.Of(shardcast.EventRestored)) > 0 })
	t.Logf("restored %v after the kill", time.Since(killed).Round(time.Millisecond))

	// The path is healthy: messages flow.
	require.NoError(t, pub.Publish(ctx, "watched", []byte("after")))
	waitFor(t, "delivery after the restore", func() bool { return rec.count("watched") == 1 })

	time.Sleep(4 * time.Second)
	for _, ev := range evs.All() {
		t.Logf("event: %v", ev)
	}
	for _, ev := range evs.Of(shardcast.EventInterrupted) {
		if errors.Is(ev.Err, shardcast.ErrSilentPath) {
			t.Errorf("a healthy, restored path was reported silent: %v", ev)
		}
	}
}

// TestProbeLostWithLastUnsubscribe: a probe in flight when the path's
// last channel is unsubscribed (its probe channel goes with it) is
// forgotten: the next Subscribe on that path, however much later, must
// not find the path reported silent at the first probe tick.
func TestProbeLostWithLastUnsubscribe(t *testing.T) {
	srv := redistest.StartStandalone(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	pub := newBroker(t, Config{Addrs: addrs(srv)})
	proxy := redistest.StartProxy(t, srv.Addr())
	rec := newRecorder()
	var evs events
	sub := newBroker(t, Config{Addrs: []string{proxy.Addr()}, Agreement: sameServerOtherName,
		Options: shardcast.Options{Handler: rec.handle, OnEvent: evs.Add},
		Conn:    shardcast.ConnOptions{ProbeInterval: 100 * time.Millisecond, ProbeTimeout: time.Second}})
	require.NoError(t, sub.Subscribe(ctx, "first"))
	time.Sleep(500 * time.Millisecond)

	// Hold a probe back (as if in flight), then unsubscribe the last channel.
	proxy.DropPushes(func(kind, ch string) bool { return strings.HasPrefix(ch, shardcast.ProbeChannelPrefix) })
	waitFor(t, "a probe in flight", func() bool { return proxy.Dropped() > 0 })
	require.NoError(t, sub.Unsubscribe(ctx, "first"))
	proxy.DropPushes(nil)

	time.Sleep(2 * time.Second) // much later, a new channel on the same path
	require.NoError(t, sub.Subscribe(ctx, "second"))
	require.NoError(t, pub.Publish(ctx, "second", []byte("x")))
	waitFor(t, "delivery", func() bool { return rec.count("second") == 1 })
	time.Sleep(500 * time.Millisecond)
	for _, ev := range evs.All() {
		t.Logf("event: %v (since %v)", ev, ev.Since.Format("15:04:05.000"))
	}
	for _, ev := range evs.Of(shardcast.EventInterrupted) {
		if errors.Is(ev.Err, shardcast.ErrSilentPath) {
			t.Errorf("a healthy, freshly subscribed path was reported silent: %v", ev)
		}
	}
}
