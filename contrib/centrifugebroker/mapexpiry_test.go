package centrifugebroker

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/centrifugal/centrifuge"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/redistest"
	"github.com/shardcast/shardcast/sharded"
)

// TestMapSweeperVisitsOnlyDueChannels subscribes a node with a short
// ExpiryInterval to many map channels whose entries expire, on both
// engines: once it has looked at each, channels with nothing due cost no
// script (a sweeper that visited every subscribed channel each interval
// would run one per channel per interval), and an entry written later is
// still removed, its removal published, when it falls due.
func TestMapSweeperVisitsOnlyDueChannels(t *testing.T) {
	const channels, interval = 100, 50 * time.Millisecond
	for name, start := range mapEngines() {
		t.Run(name, func(t *testing.T) {
			env := start(t)
			n := newMapNode(t, env.cfg, MapConfig{ExpiryInterval: interval})
			var chs []string
			servers := map[*redistest.Server]bool{}
			for i := range channels {
				ch := fmt.Sprintf("%ssweep-%d", mapShort, i)
				chs = append(chs, ch)
				servers[env.serverOf(ch)] = true
			}
			require.NoError(t, n.m.Subscribe(chs...))
			t.Cleanup(func() { _ = n.m.Unsubscribe(chs...) })
			scripts := func() int64 {
				ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
				defer cancel()
				var sum int64
				for s := range servers {
					calls, err := s.CommandStats(ctx)
					require.NoError(t, err)
					sum += calls["evalsha"] + calls["eval"]
				}
				return sum
			}
			// The first visits, one per channel, happen at Subscribe.
			waitFor(t, func() bool { return scripts() >= channels },
				func() string { return fmt.Sprintf("%d scripts, want a first visit of each channel", scripts()) })
			before := scripts()
			time.Sleep(20 * interval)
			idle := scripts() - before
			// Other scripts (the sharded engine's layout heartbeat) may
			// run meanwhile; a visit of every channel would be 20 x 100.
			assert.Less(t, idle, int64(channels/2), "scripts over 20 intervals with nothing due")

			ch := chs[7]
			publish(t, env.a.m, ch, "k", "v", centrifuge.MapPublishOptions{})
			var got []received
			waitFor(t, func() bool {
				got = n.rec.get(ch)
				return len(got) >= 2
			}, func() string { return fmt.Sprintf("the expired key's removal, got %d publications", len(got)) })
			assert.True(t, got[1].pub.Removed, "the second publication removes the key")
			assert.Equal(t, "k", got[1].pub.Key)
		})
	}
}

// TestDueQueue checks the sweeper's schedule on its own: a channel has one
// visit, the earliest asked for; visits come out in time order; an
// unfollowed channel's visits are dropped.
func TestDueQueue(t *testing.T) {
	s := &expirySweeper{ttl: map[string]time.Duration{"a": time.Second, "b": time.Second, "c": time.Second},
		due: map[string]time.Time{}, wake: make(chan struct{}, 1)}
	t0 := time.Unix(1000, 0)
	s.schedule("a", t0.Add(3*time.Second))
	s.schedule("a", t0.Add(5*time.Second)) // later: ignored
	s.schedule("b", t0.Add(2*time.Second))
	s.schedule("a", t0.Add(1*time.Second)) // earlier: replaces
	s.schedule("c", t0.Add(4*time.Second))
	s.schedule("x", t0) // not followed
	s.unsubscribed("c")

	got, next := s.takeDue(t0)
	assert.Empty(t, got)
	assert.Equal(t, t0.Add(time.Second), next)
	got, next = s.takeDue(t0.Add(2 * time.Second))
	assert.Equal(t, []string{"a", "b"}, got)
	assert.True(t, next.IsZero(), "a's later visit was replaced, c's dropped: nothing left, got %v", next)
	assert.Empty(t, s.due)
}

// TestMapSweeperVisitsAfterLoss: the engine's loss events schedule at once
// a visit of the map channels they name (live updates that would have
// scheduled one may be lost), not of ordinary channels; a truncated
// EventDropped schedules every followed map channel. The sweeper's
// goroutine is not started, so the schedule is read as the events left
// it.
func TestMapSweeperVisitsAfterLoss(t *testing.T) {
	env := mapEngines()["sharded"](t)
	n := newMapNode(t, env.cfg, MapConfig{ExpiryInterval: -1})
	s := &expirySweeper{m: n.m, interval: time.Hour, ttl: map[string]time.Duration{},
		due: map[string]time.Time{}, wake: make(chan struct{}, 1)}
	n.m.sweeper = s
	t.Cleanup(func() { n.m.sweeper = nil }) // not running: Close must not stop it
	a, b := mapShort+"loss-a", mapShort+"loss-b"
	require.NoError(t, n.m.Subscribe(a, b))
	t.Cleanup(func() { _ = n.m.Unsubscribe(a, b) })
	taken, _ := s.takeDue(time.Now())
	assert.ElementsMatch(t, []string{a, b}, taken, "a first visit of each at Subscribe")

	n.b.onEvent(shardcast.Event{Kind: shardcast.EventRestored, Channels: []string{n.m.wire(a), a}})
	taken, _ = s.takeDue(time.Now())
	assert.Equal(t, []string{a}, taken, "the restored map channel, not the ordinary channel of its name")

	n.b.onEvent(shardcast.Event{Kind: shardcast.EventDropped, Channels: []string{n.m.wire(a)}, Truncated: true})
	taken, _ = s.takeDue(time.Now())
	assert.ElementsMatch(t, []string{a, b}, taken, "a truncated drop: every followed channel")
}

// TestMapEntryDueWithItsState: on a map channel whose KeyTTL equals its
// MetaTTL (Centrifuge allows it, and derives it when KeyTTL is at least
// ten StreamTTLs), the entry written last falls due just as the channel's
// state, kept MetaTTL after the last write, expires. Its removal must
// still reach a subscribed client, or the client be told to re-sync: the
// client ends holding the map Redis holds. Reads keep the meta alive
// meanwhile, and with it the epoch and position, as Centrifuge's position
// checks would, so nothing else tells the client.
func TestMapEntryDueWithItsState(t *testing.T) {
	srv := redistest.StartStandalone(t)
	cfg := Config{Sharded: &sharded.Config{Addrs: []string{srv.Addr()}}, CallTimeout: 3 * time.Second}
	_, pubMB, _ := startMapClientNode(t, cfg)
	subNode, _, _ := startMapClientNode(t, cfg)
	ch := mapLapse + "due-with-state"
	c := newMapClient(t, subNode, ch)
	publish(t, pubMB, ch, "k", "v", centrifuge.MapPublishOptions{})
	waitInStep(t, c, pubMB)
	var s map[string]string
	waitFor(t, func() bool {
		var err error
		s, _, err = serverMap(bg, pubMB, ch)
		return err == nil && len(s) == 0
	}, func() string { return fmt.Sprintf("the entry to expire: %v", s) })
	waitInStep(t, c, pubMB)
}
