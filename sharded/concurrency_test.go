package sharded

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestConcurrentCallsStayConsistent lets calls for the same channels
// overlap freely (several channels per call, spread over instances and
// connections): whatever order they land in, the broker's view and
// Redis's must agree at the end.
func TestConcurrentCallsStayConsistent(t *testing.T) {
	const (
		goroutines = 12
		rounds     = 30
		channels   = 16
	)
	servers := startServers(t, 2)
	rec := newRecorder()
	sub := newBroker(t, Config{Addrs: addrs(servers...), Conn: shardcast.ConnOptions{SubscribeConns: 2}, Options: shardcast.Options{Handler: rec.handle}})
	chans := channelNames("mix:", channels)
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 11))
			for range rounds {
				pick := make([]string, 1+rng.IntN(4))
				for k := range pick {
					pick[k] = chans[rng.IntN(channels)]
				}
				var err error
				if rng.IntN(2) == 0 {
					err = sub.Subscribe(ctx, pick...)
				} else {
					err = sub.Unsubscribe(ctx, pick...)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	wanted := make([]bool, channels)
	for i, ch := range chans {
		for _, p := range sub.core.Paths {
			wanted[i] = wanted[i] || slices.Contains(p.Wanted(), ch)
		}
	}
	checkSubscriptions(t, sub, servers, chans, wanted, rec)
}

// checkSubscriptions asserts that exactly the channels marked subscribed
// are held by Redis, once, on their own instance, and that only they
// receive a publish.
func checkSubscriptions(t *testing.T, sub *Broker, servers []*redistest.Server, chans []string, subscribed []bool, rec *recorder) {
	t.Helper()
	ctx := context.Background()
	want := 0
	var on []string
	for i, ch := range chans {
		var n int64
		if subscribed[i] {
			n = 1
			want++
			on = append(on, ch)
		}
		home := sub.Shard(ch)
		assert.Equal(t, n, numsub(t, servers[home], ch), "channel %s on its instance", ch)
		assert.Zero(t, numsub(t, servers[1-home], ch), "channel %s on the other instance", ch)
	}
	assert.Equal(t, want, sub.Stats().Channels)
	assert.Positive(t, want, "the random walk left nothing subscribed; the delivery check would be empty")

	rec.reset()
	for i, ch := range chans {
		// PUBLISH answers how many subscribers Redis handed the message to.
		got, err := servers[sub.Shard(ch)].Do(ctx, "PUBLISH", ch, "final")
		require.NoError(t, err)
		assert.EqualValues(t, map[bool]int64{true: 1, false: 0}[subscribed[i]], got, "receivers of %s", ch)
	}
	waitFor(t, "the subscribed channels to deliver", func() bool { return len(rec.missing(on, 1)) == 0 })
	for i, ch := range chans {
		if !subscribed[i] {
			assert.Zero(t, rec.count(ch), "unsubscribed channel %s delivered", ch)
		}
	}
}

// TestFailedSubscribeKeepsChannelsALaterCallAskedFor: call A subscribes
// one channel on each of two instances, the second of which is frozen, so
// A fails at its ctx and undoes its first channel. Call B asks for that
// same channel while A still waits, and succeeds. A's undo must leave the
// channel subscribed: B was told it is.
func TestFailedSubscribeKeepsChannelsALaterCallAskedFor(t *testing.T) {
	servers := startServers(t, 2)
	rec := newRecorder()
	sub := newBroker(t, Config{Addrs: addrs(servers...), Options: shardcast.Options{Handler: rec.handle}})
	pub := newBroker(t, Config{Addrs: addrs(servers...)})
	var shared, stuck string
	for _, ch := range channelNames("claim:", 64) {
		switch {
		case shared == "" && sub.Shard(ch) == 0:
			shared = ch
		case stuck == "" && sub.Shard(ch) == 1:
			stuck = ch
		}
	}
	require.NotEmpty(t, shared)
	require.NotEmpty(t, stuck)
	require.Equal(t, 0, sub.Shard("claim:probe"), "the probe below must wait for instance 0's turn")

	require.NoError(t, servers[1].Pause())
	resumed := false
	defer func() {
		if !resumed {
			_ = servers[1].Resume()
		}
	}()
	aCtx, aCancel := context.WithCancel(context.Background())
	defer aCancel()
	aErr := make(chan error, 1)
	go func() { aErr <- sub.Subscribe(aCtx, shared, stuck) }()
	// A holds shared once instance 0 has it; B then finds it subscribed.
	waitFor(t, "call A to subscribe its first channel", func() bool { return numsub(t, servers[0], shared) == 1 })
	require.NoError(t, sub.Subscribe(context.Background(), shared), "call B")
	aCancel()
	select {
	case err := <-aErr:
		require.ErrorIs(t, err, context.Canceled, "call A fails at its ctx")
	case <-time.After(waitTimeout):
		t.Fatal("call A ignored its ctx")
	}
	require.NoError(t, servers[1].Resume())
	resumed = true

	// Unsubscribe of an unknown channel waits for instance 0's turn, so A's
	// undo (if it ran there) is done when it returns.
	require.NoError(t, sub.Unsubscribe(context.Background(), "claim:probe"))
	assert.EqualValues(t, 1, numsub(t, servers[0], shared), "B's channel stays subscribed")
	require.NoError(t, pub.Publish(context.Background(), shared, []byte("kept")))
	waitFor(t, "delivery on the channel B asked for", func() bool { return rec.count(shared) == 1 })
	assert.Equal(t, 1, sub.Stats().Channels, "only B's channel is held; A's other one was undone")
}

// TestOverlappingFailedSubscribesLeaveNothing: two Subscribe calls that
// share a channel both fail (each also waits on a dead instance until its
// ctx ends); the shared channel, which the first call subscribed, is not
// left wanted or subscribed in Redis. (It was: the second call took over
// the channel, so the first call's undo left it, and the second's undo
// skipped it because it had not added it.)
func TestOverlappingFailedSubscribesLeaveNothing(t *testing.T) {
	servers := startServers(t, 2)
	b := newBroker(t, Config{Addrs: addrs(servers...), Options: shardcast.Options{Handler: newRecorder().handle}})
	names := channelNames("ovl-", 40)
	onA, onB := onShard(b, names, 0), onShard(b, names, 1)
	require.GreaterOrEqual(t, len(onB), 2)
	shared := onA[0]
	require.NoError(t, servers[1].Kill())

	ctx := context.Background()
	first, cancelFirst := context.WithCancel(ctx)
	firstDone := make(chan error, 1)
	go func() { firstDone <- b.Subscribe(first, shared, onB[0]) }()
	waitFor(t, "the first call to subscribe the shared channel", func() bool {
		return slices.Contains(b.core.Paths[router{b}.PathOf(shared)].Wanted(), shared)
	})
	second, cancelSecond := context.WithCancel(ctx)
	secondDone := make(chan error, 1)
	go func() { secondDone <- b.Subscribe(second, shared, onB[1]) }()
	time.Sleep(200 * time.Millisecond) // the second call has found the shared channel wanted and waits on B

	cancelFirst()
	require.ErrorIs(t, <-firstDone, context.Canceled)
	cancelSecond()
	require.ErrorIs(t, <-secondDone, context.Canceled)
	assert.NotContains(t, b.core.Paths[router{b}.PathOf(shared)].Wanted(), shared, "both calls failed: the shared channel is not wanted")
	waitFor(t, "the shared channel unsubscribed in Redis", func() bool { return numsub(t, servers[0], shared) == 0 })
}
