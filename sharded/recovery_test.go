package sharded

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// onShard returns the channels the broker places on shard i, sorted.
func onShard(b *Broker, channels []string, i int) []string {
	var out []string
	for _, ch := range channels {
		if b.Shard(ch) == i {
			out = append(out, ch)
		}
	}
	slices.Sort(out)
	return out
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// TestKillAndRestartInstance kills one of two instances and starts it
// again on the same port: the broker reports exactly that shard's channels
// as interrupted and then restored, and every channel delivers again.
func TestKillAndRestartInstance(t *testing.T) {
	servers := startServers(t, 2)
	rec := newRecorder()
	var evs events
	sub := newBroker(t, Config{Addrs: addrs(servers...), Options: shardcast.Options{Handler: rec.handle, OnEvent: evs.Add}})
	pub := newBroker(t, Config{Addrs: addrs(servers...)})
	chans := channelNames("restart:", 2000)
	require.NoError(t, sub.Subscribe(context.Background(), chans...))
	victim := servers[1]
	victimChans := onShard(sub, chans, 1)
	require.NotEmpty(t, victimChans)

	killedAt := time.Now()
	require.NoError(t, victim.Kill())
	waitFor(t, "EventInterrupted", func() bool { return len(evs.Of(shardcast.EventInterrupted)) > 0 })
	require.NoError(t, victim.Restart(context.Background()))
	waitFor(t, "EventRestored", func() bool { return len(evs.Of(shardcast.EventRestored)) > 0 })

	interrupted := evs.Of(shardcast.EventInterrupted)
	require.Len(t, interrupted, 1, "one connection lost, one event")
	assert.Equal(t, victim.Addr(), interrupted[0].Shard)
	assert.Equal(t, victimChans, sorted(interrupted[0].Channels))
	// The loss dates from the wire's last proof of health: before the
	// kill, by at most a HealthInterval (what a server queued for the
	// connection may have been lost from then on).
	assert.False(t, interrupted[0].Since.After(killedAt), "interruption starts no later than the kill")
	assert.True(t, interrupted[0].Since.After(killedAt.Add(-shardcast.DefaultHealthInterval-time.Second)),
		"interruption starts at most a HealthInterval before the kill: %v before", killedAt.Sub(interrupted[0].Since))

	restored := evs.Of(shardcast.EventRestored)
	require.Len(t, restored, 1)
	assert.Equal(t, victim.Addr(), restored[0].Shard)
	assert.Equal(t, victimChans, sorted(restored[0].Channels))
	assert.Equal(t, interrupted[0].Since, restored[0].Since, "the gap starts when the interruption did")
	assert.True(t, restored[0].Until.After(restored[0].Since))
	assert.EqualValues(t, 1, sub.Stats().Reconnects)
	assert.Equal(t, len(victimChans), pubsubChannels(t, victim), "restarted instance holds its channels again")

	publishUntilAccepted(t, pub, victimChans[0])
	rec.reset()
	publishAll(t, pub, chans, payloadOf)
	waitFor(t, "every channel to deliver after the restart", func() bool { return len(rec.missing(chans, 1)) == 0 })
}

// TestResubscribeIsBatched kills the subscriber's connections with CLIENT
// KILL TYPE pubsub on an instance holding 5,000 of its channels: the
// broker resubscribes them in at most ceil(5000/512) SUBSCRIBE commands
// per connection, and every channel delivers again.
func TestResubscribeIsBatched(t *testing.T) {
	for _, conns := range []int{1, 2} {
		t.Run(fmt.Sprintf("conns=%d", conns), func(t *testing.T) {
			const total = 5000
			servers := startServers(t, 1)
			s := servers[0]
			ctx := context.Background()
			rec := newRecorder()
			var evs events
			sub := newBroker(t, Config{
				Addrs: addrs(s), Conn: shardcast.ConnOptions{SubscribeConns: conns},
				Options: shardcast.Options{Handler: rec.handle, OnEvent: evs.Add},
			})
			pub := newBroker(t, Config{Addrs: addrs(s)})
			chans := channelNames("batch:", total)
			require.NoError(t, sub.Subscribe(ctx, chans...))
			require.Equal(t, total, pubsubChannels(t, s))

			before, err := s.CommandStats(ctx)
			require.NoError(t, err)
			killed, err := s.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub")
			require.NoError(t, err)
			require.EqualValues(t, conns, killed, "one pubsub connection per ConnsPerShard")
			waitFor(t, "every connection restored", func() bool { return len(evs.Of(shardcast.EventRestored)) == conns })
			after, err := s.CommandStats(ctx)
			require.NoError(t, err)

			// Each connection carries its share n_i of the channels and may
			// send ceil(n_i/512) commands; summed over connections that is at
			// most ceil(5000/512) + conns - 1.
			maxCmds := int64((total+shardcast.DefaultSubscribeBatch-1)/shardcast.DefaultSubscribeBatch + conns - 1)
			sent := after["subscribe"] - before["subscribe"]
			assert.Positive(t, sent)
			assert.LessOrEqual(t, sent, maxCmds, "SUBSCRIBE commands sent by the resubscribe")
			resubscribed := 0
			for _, ev := range evs.Of(shardcast.EventRestored) {
				resubscribed += len(ev.Channels)
			}
			assert.Equal(t, total, resubscribed)
			assert.Equal(t, total, pubsubChannels(t, s))

			publishAll(t, pub, chans, payloadOf)
			waitFor(t, "every channel to deliver after the resubscribe", func() bool { return len(rec.missing(chans, 1)) == 0 })
		})
	}
}

// TestSubscribeWhileShardDown: a Subscribe for a channel whose instance is
// down waits until ctx ends and says so; it never reports success, and the
// channels of the call on the instance that is up are not left subscribed.
// An Unsubscribe while down is remembered, and ends that channel's
// interruption. Once the instance is back, the same Subscribe succeeds and
// delivers.
func TestSubscribeWhileShardDown(t *testing.T) {
	servers := startServers(t, 2)
	rec := newRecorder()
	var evs events
	sub := newBroker(t, Config{Addrs: addrs(servers...), Options: shardcast.Options{Handler: rec.handle, OnEvent: evs.Add}})
	pub := newBroker(t, Config{Addrs: addrs(servers...)})
	chans := channelNames("down:", 40)
	down, up := onShard(sub, chans, 0), onShard(sub, chans, 1)
	require.GreaterOrEqual(t, len(down), 3)
	require.NotEmpty(t, up)
	s := servers[0]
	kept, dropped, during := down[0], down[1], down[2]
	require.NoError(t, sub.Subscribe(context.Background(), kept, dropped))

	require.NoError(t, s.Kill())
	waitFor(t, "EventInterrupted", func() bool { return len(evs.Of(shardcast.EventInterrupted)) > 0 })

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	err := sub.Subscribe(ctx, up[0], during)
	cancel()
	require.Error(t, err)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Equal(t, 2, sub.Stats().Channels, "the failed Subscribe added nothing")
	assert.Zero(t, numsub(t, servers[1], up[0]), "the reachable shard's channel of the failed call was undone")
	require.NoError(t, sub.Unsubscribe(context.Background(), dropped), "unsubscribing needs no connection")

	require.NoError(t, s.Restart(context.Background()))
	ctx, cancel = context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	require.NoError(t, sub.Subscribe(ctx, up[0], during))
	assert.EqualValues(t, 1, numsub(t, s, during))
	assert.EqualValues(t, 1, numsub(t, s, kept), "resubscribed after the restart")
	assert.Zero(t, numsub(t, s, dropped), "unsubscribed while down, so not resubscribed")
	assert.EqualValues(t, 1, numsub(t, servers[1], up[0]))
	assert.Equal(t, 3, sub.Stats().Channels)
	// Events reach OnEvent from the emitter's goroutine: the resubscribe
	// can be confirmed, and Subscribe return, before its EventRestored
	// is handed over.
	// The channel unsubscribed while down left its interruption then, and
	// the one kept is restored by the resubscribe: one event each, in that
	// order, naming nothing else.
	waitFor(t, "EventRestored", func() bool { return len(evs.Of(shardcast.EventRestored)) >= 2 })
	restored := evs.Of(shardcast.EventRestored)
	require.Len(t, restored, 2)
	assert.Equal(t, []string{dropped}, restored[0].Channels)
	assert.Equal(t, []string{kept}, restored[1].Channels)
	assert.Empty(t, evs.Unrestored(), "every channel reported interrupted is restored")

	publishUntilAccepted(t, pub, during)
	for _, ch := range []string{kept, during, up[0]} {
		require.NoError(t, pub.Publish(ctx, ch, []byte("x")))
	}
	waitFor(t, "every subscribed channel to deliver", func() bool { return len(rec.missing([]string{kept, during, up[0]}, 1)) == 0 })
}

// TestSubscribeRacingAKill subscribes in a loop while the instance is
// killed: no call may report success unless Redis holds the channel once
// the instance is back.
func TestSubscribeRacingAKill(t *testing.T) {
	servers := startServers(t, 1)
	s := servers[0]
	var evs events
	sub := newBroker(t, Config{Addrs: addrs(s), Options: shardcast.Options{Handler: func(shardcast.Message) {}, OnEvent: evs.Add}})

	var (
		confirmed []string
		failures  []error
	)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			ch := "race:" + string(rune('a'+i%26)) + time.Now().Format("150405.000000000")
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			if err := sub.Subscribe(ctx, ch); err == nil {
				confirmed = append(confirmed, ch)
			} else {
				failures = append(failures, err)
			}
			cancel()
		}
	}()
	waitFor(t, "some subscribes", func() bool { return sub.Stats().Channels >= 20 })
	require.NoError(t, s.Kill())
	require.NoError(t, s.Restart(context.Background()))
	waitFor(t, "EventRestored", func() bool { return len(evs.Of(shardcast.EventRestored)) > 0 })
	waitFor(t, "subscribes after the restart", func() bool { return sub.Stats().Channels >= 40 })
	close(stop)
	<-done
	// Every confirmed channel is held by Redis: before the kill it was
	// resubscribed, after it was subscribed on the new connection.
	// A call may run out of time while the instance is down, but it
	// must not fail for the broken wire while ctx still has time: it waits
	// for the reconnect instead.
	for _, err := range failures {
		require.ErrorIs(t, err, context.DeadlineExceeded)
	}
	assert.Equal(t, len(confirmed), pubsubChannels(t, s))
	assert.Equal(t, len(confirmed), sub.Stats().Channels)
	for _, ch := range confirmed {
		require.EqualValues(t, 1, numsub(t, s, ch), "channel %s", ch)
	}
}

// TestCloseWhileShardDown: Close returns while an instance is down and
// reconnects are pending, and a Subscribe waiting for that instance ends
// with ErrClosed instead of waiting for its ctx.
func TestCloseWhileShardDown(t *testing.T) {
	servers := startServers(t, 1)
	var evs events
	sub, err := New(Config{Addrs: addrs(servers...), Options: shardcast.Options{Handler: func(shardcast.Message) {}, OnEvent: evs.Add}})
	require.NoError(t, err)
	require.NoError(t, sub.Subscribe(context.Background(), "a"))
	require.NoError(t, servers[0].Kill())
	waitFor(t, "EventInterrupted", func() bool { return len(evs.Of(shardcast.EventInterrupted)) > 0 })

	result := make(chan error, 1)
	go func() { result <- sub.Subscribe(context.Background(), "b") }()
	require.NoError(t, sub.Close())
	require.ErrorIs(t, <-result, shardcast.ErrClosed)
}

// TestFrozenInstance: against an instance that stops answering (SIGSTOP:
// sockets open, no replies) every call still returns when its ctx ends,
// even with a CommandTimeout far beyond the test's patience; the undo of a
// cut-short Subscribe and the rest of a cut-short Unsubscribe reach Redis
// once it answers again, ahead of later calls.
func TestFrozenInstance(t *testing.T) {
	s := startServers(t, 1)[0]
	rec := newRecorder()
	var evs events
	sub := newBroker(t, Config{
		Addrs: addrs(s), Conn: shardcast.ConnOptions{CommandTimeout: time.Hour},
		Options: shardcast.Options{Handler: rec.handle, OnEvent: evs.Add},
	})
	pub := newBroker(t, Config{Addrs: addrs(s)})
	require.NoError(t, sub.Subscribe(context.Background(), "kept", "dropped"))

	// call runs f with a short ctx and waits for it (bounded, so a call
	// that ignores its ctx fails the test instead of hanging it).
	call := func(f func(context.Context) error) error {
		result := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			result <- f(ctx)
		}()
		select {
		case err := <-result:
			return err
		case <-time.After(waitTimeout):
			t.Fatalf("call still running %v after its ctx ended", waitTimeout)
			return nil
		}
	}
	resume := func() {
		require.NoError(t, s.Resume())
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		// Waits for the connection's turn, so whatever was left in the
		// background is done when it returns.
		require.NoError(t, sub.Subscribe(ctx, "kept"))
		require.NoError(t, sub.Unsubscribe(ctx, "probe"))
	}

	require.NoError(t, s.Pause())
	err := call(func(ctx context.Context) error { return sub.Subscribe(ctx, "frozen") })
	require.ErrorIs(t, err, context.DeadlineExceeded)
	err = call(func(ctx context.Context) error { return pub.Publish(ctx, "kept", []byte("x")) })
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Equal(t, 2, sub.Stats().Channels)
	resume()
	assert.Zero(t, numsub(t, s, "frozen"), "the cut-short Subscribe was undone")

	require.NoError(t, s.Pause())
	err = call(func(ctx context.Context) error { return sub.Unsubscribe(ctx, "dropped") })
	require.NoError(t, err, "the unsubscribe is committed and finishes in the background")
	assert.Equal(t, 1, sub.Stats().Channels)
	resume()
	assert.Zero(t, numsub(t, s, "dropped"), "the cut-short Unsubscribe reached Redis")
	assert.EqualValues(t, 1, numsub(t, s, "kept"))

	require.NoError(t, pub.Publish(context.Background(), "kept", []byte("after")))
	waitFor(t, "delivery after the freeze", func() bool { return rec.count("kept") >= 1 })

	// The calls returned while the instance was still frozen, so the test
	// resumed it long before the health ping gives up on a silent wire
	// (HealthTimeout, 3 s): the subscribe connection lived through both
	// freezes. A call that held on past its ctx would have kept the
	// instance frozen until the ping cut the wire.
	assert.Zero(t, sub.Stats().Reconnects)
	assert.Empty(t, evs.Of(shardcast.EventInterrupted))
}

// TestFrozenInstanceDetectedByPing freezes an instance for longer than the
// health ping allows: the broker drops the silent connection, reports the
// loss from the last answered ping (before the freeze), and after the
// instance wakes reconnects and delivers again.
func TestFrozenInstanceDetectedByPing(t *testing.T) {
	s := startServers(t, 1)[0]
	rec := newRecorder()
	var evs events
	sub := newBroker(t, Config{
		Addrs: addrs(s), Conn: shardcast.ConnOptions{HealthInterval: 100 * time.Millisecond, HealthTimeout: 300 * time.Millisecond},
		Options: shardcast.Options{Handler: rec.handle, OnEvent: evs.Add},
	})
	pub := newBroker(t, Config{Addrs: addrs(s)})
	chans := channelNames("frost:", 20)
	require.NoError(t, sub.Subscribe(context.Background(), chans...))

	pausedAt := time.Now()
	require.NoError(t, s.Pause())
	waitFor(t, "an Interrupted event from the health ping", func() bool {
		return len(evs.Of(shardcast.EventInterrupted)) > 0
	})
	detected := time.Since(pausedAt)
	ev := evs.Of(shardcast.EventInterrupted)[0]
	assert.ElementsMatch(t, chans, ev.Channels)
	assert.False(t, ev.Since.After(pausedAt), "the loss window starts at the last answered ping, before the freeze (since %v, paused %v)", ev.Since, pausedAt)
	t.Logf("frozen instance detected after %v", detected.Round(time.Millisecond))

	require.NoError(t, s.Resume())
	waitFor(t, "a Restored event", func() bool { return len(evs.Of(shardcast.EventRestored)) > 0 })
	publishAll(t, pub, chans, payloadOf)
	waitFor(t, "every channel to deliver after the thaw", func() bool { return len(rec.missing(chans, 1)) == 0 })
}
