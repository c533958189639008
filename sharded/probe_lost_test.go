package sharded

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/engine"
	"github.com/shardcast/shardcast/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// probedPair is a publishing broker on a standalone Redis and a
// subscribing one with delivery probes on, reaching it through a proxy
// that can hold probes back.
type probedPair struct {
	srv      *redistest.Server
	proxy    *redistest.Proxy
	pub, sub *Broker
	rec      *recorder
	evs      *events
}

func startProbedPair(t *testing.T, probeTimeout time.Duration) *probedPair {
	srv := redistest.StartStandalone(t)
	pp := &probedPair{srv: srv, proxy: redistest.StartProxy(t, srv.Addr()), rec: newRecorder(), evs: &events{}}
	pp.pub = newBroker(t, Config{Addrs: addrs(srv)})
	pp.sub = newBroker(t, Config{Addrs: []string{pp.proxy.Addr()}, Agreement: sameServerOtherName,
		Options: shardcast.Options{Handler: pp.rec.handle, OnEvent: pp.evs.Add},
		Conn:    shardcast.ConnOptions{ProbeInterval: 100 * time.Millisecond, ProbeTimeout: probeTimeout}})
	return pp
}

// holdProbe makes the proxy hold probes back until one is held: a probe
// in flight. release lets later ones through.
func (pp *probedPair) holdProbe(t *testing.T) (release func()) {
	pp.proxy.DropPushes(func(kind, ch string) bool { return strings.HasPrefix(ch, engine.ProbeChannelPrefix) })
	waitFor(t, "a probe in flight", func() bool { return pp.proxy.Dropped() > 0 })
	return func() { pp.proxy.DropPushes(nil) }
}

// noneSilent fails the test for every EventInterrupted that reported a
// path silent.
func (pp *probedPair) noneSilent(t *testing.T, what string) {
	for _, ev := range pp.evs.All() {
		t.Logf("event: %v (since %v)", ev, ev.Since.Format("15:04:05.000"))
	}
	for _, ev := range pp.evs.Of(shardcast.EventInterrupted) {
		if errors.Is(ev.Err, shardcast.ErrSilentPath) {
			t.Errorf("%s was reported silent: %v", what, ev)
		}
	}
}

// TestProbeLostWithItsConnection: a probe in flight when its subscribe
// connection dies is lost with it. The loss is reported by the connection
// drop (Interrupted, then Restored after the resubscribe); the stale probe
// is forgotten, not judged when its old deadline passes, which would
// report the healthy path silent and resubscribe it a second time.
func TestProbeLostWithItsConnection(t *testing.T) {
	pp := startProbedPair(t, 3*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	require.NoError(t, pp.sub.Subscribe(ctx, "watched"))
	time.Sleep(500 * time.Millisecond) // probes come and go

	// The connection dies with a probe in flight on it (the proxy holds the
	// probe's push back, as a dying socket would).
	pp.holdProbe(t)()
	_, err := pp.srv.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub")
	require.NoError(t, err)
	killed := time.Now()
	waitFor(t, "the restore after the drop", func() bool { return len(pp.evs.Of(shardcast.EventRestored)) > 0 })
	t.Logf("restored %v after the kill", time.Since(killed).Round(time.Millisecond))
	assert.Equal(t, []string{"watched"}, pp.evs.Of(shardcast.EventRestored)[0].Channels,
		"the resubscribe's Restored names the channel, not the probe's")

	// The path is healthy: messages flow.
	require.NoError(t, pp.pub.Publish(ctx, "watched", []byte("after")))
	waitFor(t, "delivery after the restore", func() bool { return pp.rec.count("watched") == 1 })

	time.Sleep(4 * time.Second) // past the stale probe's deadline
	pp.noneSilent(t, "a healthy, restored path")
}

// TestProbeLostWithLastUnsubscribe: a probe in flight when the path's
// last channel is unsubscribed (its probe channel goes with it) is
// forgotten: the next Subscribe on that path, however much later, must
// not find the path reported silent at the first probe tick.
func TestProbeLostWithLastUnsubscribe(t *testing.T) {
	pp := startProbedPair(t, time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	require.NoError(t, pp.sub.Subscribe(ctx, "first"))
	time.Sleep(500 * time.Millisecond)

	// Hold a probe back (as if in flight), then unsubscribe the last channel.
	release := pp.holdProbe(t)
	require.NoError(t, pp.sub.Unsubscribe(ctx, "first"))
	release()

	time.Sleep(2 * time.Second) // much later, a new channel on the same path
	require.NoError(t, pp.sub.Subscribe(ctx, "second"))
	require.NoError(t, pp.pub.Publish(ctx, "second", []byte("x")))
	waitFor(t, "delivery", func() bool { return pp.rec.count("second") == 1 })
	time.Sleep(500 * time.Millisecond) // several probe ticks on the new channel
	pp.noneSilent(t, "a healthy, freshly subscribed path")
}
