package sharded

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/brokertest"
	"github.com/shardcast/shardcast/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMaxClients: an instance at maxclients refuses new connections with
// an error reply. New then fails and says why. A subscribe connection
// dropped while the instance is full is reported interrupted, and its
// reconnect keeps being refused and retried, reported as EventError
// naming the instance and the cause (once for the first refusal, then
// once every ten); the publisher's open connection keeps working. Once a
// client slot frees, the subscribe connection gets it, the channel is
// restored and delivers.
func TestMaxClients(t *testing.T) {
	s := redistest.StartStandalone(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	admin, err := s.Dial(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = admin.Close() })
	rec := newRecorder()
	var evs events
	sub := newBroker(t, Config{Addrs: addrs(s), Options: shardcast.Options{Handler: rec.handle, OnEvent: evs.Add},
		Conn: shardcast.ConnOptions{ReconnectMin: 5 * time.Millisecond, ReconnectMax: 20 * time.Millisecond}})
	pub := newBroker(t, Config{Addrs: addrs(s)})
	require.NoError(t, sub.Subscribe(ctx, "limit"))

	// Full: every slot taken, the last by a filler.
	open, err := admin.ClientsOpen(ctx)
	require.NoError(t, err)
	require.NoError(t, admin.SetMaxClients(ctx, open+1))
	filler, err := s.Dial(ctx)
	require.NoError(t, err)
	_, err = s.Dial(ctx)
	require.ErrorContains(t, err, "max number of clients reached", "the instance is full")

	b, err := New(Config{Addrs: addrs(s)})
	require.Error(t, err)
	require.Nil(t, b)
	assert.ErrorContains(t, err, s.Addr())
	assert.ErrorContains(t, err, "max number of clients reached")

	// One slot fewer, then the kill: the subscribe connection's slot is
	// gone with it.
	require.NoError(t, admin.SetMaxClients(ctx, open))
	refused, err := admin.RejectedConnections(ctx)
	require.NoError(t, err)
	killed, err := admin.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub")
	require.NoError(t, err)
	require.EqualValues(t, 1, killed)
	waitFor(t, "the interruption", func() bool { return len(evs.Of(shardcast.EventInterrupted)) == 1 })
	waitFor(t, "a reported refusal", func() bool { return len(evs.Of(shardcast.EventError)) > 0 })
	var attempts int
	waitFor(t, "ten more refused reconnects", func() bool {
		n, err := admin.RejectedConnections(ctx)
		require.NoError(t, err)
		attempts = n - refused
		return attempts >= 10
	})
	for _, ev := range evs.Of(shardcast.EventError) {
		assert.Equal(t, s.Addr(), ev.Shard)
		assert.ErrorContains(t, ev.Err, "max number of clients reached")
	}
	assert.LessOrEqual(t, len(evs.Of(shardcast.EventError)), attempts/10+1, "one report per ten refusals")
	assert.Empty(t, evs.Of(shardcast.EventRestored), "nothing is restored while the instance is full")
	require.NoError(t, pub.Publish(ctx, "limit", []byte("unheard")), "the publisher's open connection keeps working")

	require.NoError(t, filler.Close())
	waitFor(t, "the restore", func() bool { return len(evs.Of(shardcast.EventRestored)) == 1 })
	assert.Equal(t, []string{"limit"}, evs.Of(shardcast.EventRestored)[0].Channels)
	assert.EqualValues(t, 1, sub.Stats().Reconnects)
	require.NoError(t, pub.Publish(ctx, "limit", []byte("heard")))
	waitFor(t, "delivery after the restore", func() bool { return rec.count("limit") == 1 })
	assert.Equal(t, "heard", string(rec.get("limit")[0].Payload))
	t.Logf("%d reconnects refused, %d reported", attempts, len(evs.Of(shardcast.EventError)))
}

// TestSlowResubscribeCompletes: Conn.CommandTimeout bounds each command of
// a resubscribe, not the whole of it. Here every SUBSCRIBE waits behind a
// DEBUG SLEEP of 50 ms, so resubscribing 50 commands' worth of channels
// takes seconds, well past a CommandTimeout of one second; a deadline on
// the whole resubscribe would cut every attempt short and the channels
// would never come back (a subscriber with a million channels on a slow
// link would stay interrupted for good).
func TestSlowResubscribeCompletes(t *testing.T) {
	const n, batch = 5000, 100
	s := redistest.StartStandalone(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	evs := &brokertest.EventCounts{}
	sub := newBroker(t, Config{Addrs: addrs(s),
		Options: shardcast.Options{Handler: func(shardcast.Message) {}, OnEvent: evs.Add, SubscribeBatch: batch},
		Conn:    shardcast.ConnOptions{CommandTimeout: time.Second}})
	require.NoError(t, sub.Subscribe(ctx, channelNames("slow:", n)...))

	slowDown(t, s)

	killed := time.Now()
	_, err := s.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub")
	require.NoError(t, err)
	waitFor(t, "the restore", func() bool { return evs.Of(shardcast.EventRestored).Events > 0 })
	t.Logf("resubscribed %d channels in %d commands in %v against a CommandTimeout of 1s",
		n, sub.NodeStats()[0].ResubscribeCommands, time.Since(killed).Round(time.Millisecond))
	assert.Equal(t, brokertest.KindCount{Events: 1, Channels: n}, evs.Of(shardcast.EventRestored))
	assert.Equal(t, n, pubsubChannels(t, s))
}

// TestLatePingOnABusyWire: a health ping queued behind a long pipeline of
// the broker's own commands comes back later than HealthTimeout, but the
// replies before it keep arriving: the server is busy, not frozen, and
// the wire is kept. Here one Subscribe sends 100,000 channels to a server
// frozen 90 ms out of every 100, which takes several seconds, and pings
// time out after 1 s: long enough that a loaded machine starving the
// server's 10 ms windows does not stop every reply for that long, short
// enough that the ping behind the pipeline is late several times over.
// Dropping the wire would resend the whole Subscribe into the same
// backlog (a million channels at start-up on a loaded machine can keep a
// ping waiting for seconds).
func TestLatePingOnABusyWire(t *testing.T) {
	const n, healthTimeout = 100_000, time.Second
	s := redistest.StartStandalone(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	evs := &brokertest.EventCounts{}
	sub := newBroker(t, Config{Addrs: addrs(s),
		Options: shardcast.Options{Handler: func(shardcast.Message) {}, OnEvent: evs.Add},
		Conn:    shardcast.ConnOptions{HealthInterval: 50 * time.Millisecond, HealthTimeout: healthTimeout}})
	require.NoError(t, sub.Subscribe(ctx, "first")) // the wire is up

	// A faster server (Valkey 9) takes a batch in under 2 s: the wire is
	// kept busy with more until it has been for twice HealthTimeout, so
	// that pings behind it come back late whatever the server.
	stop := throttle(t, s)
	began := time.Now()
	total := 0
	for time.Since(began) <= 2*healthTimeout {
		require.Less(t, total, 5*n, "five batches of %d channels did not keep the wire busy for %v", n, 2*healthTimeout)
		require.NoError(t, sub.Subscribe(ctx, channelNames(fmt.Sprintf("busy%d:", total/n), n)...))
		total += n
	}
	took := time.Since(began)
	stop()
	t.Logf("subscribed %d channels in %v with pings timing out after %v", total, took.Round(time.Millisecond), healthTimeout)
	assert.Zero(t, sub.Stats().Reconnects, "the busy wire was dropped")
	assert.Zero(t, evs.Of(shardcast.EventInterrupted).Events)
	assert.Equal(t, total+1, pubsubChannels(t, s))
}

// throttle freezes s (SIGSTOP) for 90 ms out of every 100 until the
// returned function (also run when the test ends) is called: a server
// that still answers, slowly.
func throttle(t *testing.T, s *redistest.Server) (stop func()) {
	t.Helper()
	quit := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		for {
			if err := s.Pause(); err != nil {
				done <- err
				return
			}
			time.Sleep(90 * time.Millisecond)
			if err := s.Resume(); err != nil {
				done <- err
				return
			}
			select {
			case <-quit:
				done <- nil
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			close(quit)
			assert.NoError(t, <-done)
		})
	}
	t.Cleanup(stop)
	return stop
}

// slowDown keeps s busy with back-to-back DEBUG SLEEPs of 50 ms until the
// test ends: each command of another client waits for the sleep under way.
func slowDown(t *testing.T, s *redistest.Server) {
	t.Helper()
	sleeper, err := s.Dial(context.Background())
	require.NoError(t, err)
	var stop atomic.Bool
	sleeping := make(chan error, 1)
	go func() {
		for !stop.Load() {
			if _, err := sleeper.Do(context.Background(), "DEBUG", "SLEEP", "0.05"); err != nil {
				sleeping <- err
				return
			}
		}
		sleeping <- nil
	}()
	t.Cleanup(func() {
		stop.Store(true)
		assert.NoError(t, <-sleeping)
		_ = sleeper.Close()
	})
}

// TestCloseDuringReconnectStorm: four brokers, each with 20,000 channels
// over two connections to each of two instances, have their subscribe
// connections killed every few milliseconds while Subscribe calls wait
// for them. Closed in the middle of it, after the instances froze, or
// after they died, every broker's Close returns promptly, every call in
// flight returns, and no goroutine is left (brokertest.Storm).
func TestCloseDuringReconnectStorm(t *testing.T) {
	for _, end := range []string{"storm", "frozen", "killed"} {
		t.Run(end, func(t *testing.T) {
			servers := startServers(t, 2)
			storm := brokertest.Storm{
				New: func(opts shardcast.Options) (shardcast.Broker, error) {
					// Timeouts a Close must not wait out: a minute.
					return New(Config{Addrs: addrs(servers...), Options: opts, Conn: shardcast.ConnOptions{
						SubscribeConns: 2, ReconnectMin: time.Millisecond, ReconnectMax: 10 * time.Millisecond,
						DialTimeout: time.Minute, CommandTimeout: time.Minute, HealthTimeout: time.Minute}})
				},
				Brokers: 4, Channels: 20_000,
				KillSubscribers: func(ctx context.Context) error {
					for _, s := range servers {
						if _, err := s.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub"); err != nil {
							return err
						}
					}
					return nil
				},
			}
			switch end {
			case "frozen":
				storm.Then = func(t *testing.T) {
					for _, s := range servers {
						require.NoError(t, s.Pause())
						t.Cleanup(func() { _ = s.Resume() })
					}
				}
			case "killed":
				storm.Then = func(t *testing.T) {
					for _, s := range servers {
						require.NoError(t, s.Kill())
					}
				}
			}
			storm.Run(t)
		})
	}
}
