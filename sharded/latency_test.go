package sharded

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// recordedAtLeast counts the durations of s known to be at least d: those
// in buckets that end above d. It is exact, unlike a quantile estimate.
func recordedAtLeast(s shardcast.HistogramSnapshot, d time.Duration) uint64 {
	var n uint64
	for _, b := range s.Buckets {
		if b.Upper > d {
			n += b.Count
		}
	}
	return n
}

// TestLatencyRecordsDelivery: a message published through a broker is in
// the subscriber's lag and handler-time histograms; the publish-only
// broker's are empty.
func TestLatencyRecordsDelivery(t *testing.T) {
	servers := startServers(t, 1)
	ctx := context.Background()
	rec := newRecorder()
	sub := newBroker(t, Config{Addrs: addrs(servers...), Options: shardcast.Options{Handler: rec.handle}})
	pub := newBroker(t, Config{Addrs: addrs(servers...)})
	require.NoError(t, sub.Subscribe(ctx, "lag:one"))
	require.NoError(t, pub.Publish(ctx, "lag:one", []byte("x")))
	waitFor(t, "the message", func() bool { return sub.Stats().Delivered == 1 })

	ls := sub.Latency()
	assert.EqualValues(t, 1, ls.Lag.Count+ls.Lag.Negative, "one lag, negative only if the clock stepped back")
	assert.EqualValues(t, 1, ls.HandlerTime.Count)
	assert.Zero(t, pub.Latency().Lag.Count)
	assert.Nil(t, pub.Latency().Lag.Buckets)
}

// TestLatencyPausedRedisMovesLag: messages published while Redis is frozen
// (SIGSTOP) are delivered after it resumes, so each one's lag is at least
// the time from its PublishedAt to the resume. That is the only timing
// the test asserts: a causal lower bound.
func TestLatencyPausedRedisMovesLag(t *testing.T) {
	servers := startServers(t, 1)
	s := servers[0]
	ctx := context.Background()
	rec := newRecorder()
	sub := newBroker(t, Config{Addrs: addrs(servers...), Options: shardcast.Options{Handler: rec.handle}})
	pub := newBroker(t, Config{Addrs: addrs(servers...)})
	const ch, n = "lag:paused", 5
	require.NoError(t, sub.Subscribe(ctx, ch))

	require.NoError(t, s.Pause())
	paused := true
	defer func() {
		if paused {
			_ = s.Resume()
		}
	}()
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() { assert.NoError(t, pub.Publish(ctx, ch, []byte("stuck"))) })
	}
	// The stall being measured (well under the health-check timeout, so
	// no connection is dropped), not a synchronisation.
	time.Sleep(300 * time.Millisecond)
	resumed := time.Now()
	require.NoError(t, s.Resume())
	paused = false
	wg.Wait()
	waitFor(t, "the stalled messages", func() bool { return rec.count(ch) == n })

	// Nothing can be delivered before Redis resumed, so the lag recorded
	// for a message is at least resumed - PublishedAt. The shortest such
	// bound applies to every message.
	minBound := time.Duration(1<<63 - 1)
	for _, m := range rec.get(ch) {
		require.False(t, m.PublishedAt.IsZero())
		minBound = min(minBound, resumed.Sub(m.PublishedAt))
	}
	require.Positive(t, minBound, "the messages were published while Redis was frozen")
	ls := sub.Latency()
	t.Logf("lag bound from the pause %v; recorded lag p0 %v, p100 %v", minBound, ls.Lag.Quantile(0), ls.Lag.Quantile(1))
	assert.EqualValues(t, n, ls.Lag.Count)
	assert.EqualValues(t, n, recordedAtLeast(ls.Lag, minBound), "every lag covers the pause after its publish (%v)", minBound)
}

// TestLatencySlowHandlerMovesQueueDepth: messages behind a stuck handler
// show in Stats.QueueDepth and QueueHighWater; once they drain the depth
// is back to zero and the high-water mark stays.
func TestLatencySlowHandlerMovesQueueDepth(t *testing.T) {
	servers := startServers(t, 1)
	ctx := context.Background()
	gate := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(gate) }) }
	defer release()
	sub := newBroker(t, Config{Addrs: addrs(servers...), Options: shardcast.Options{
		Workers: 1, QueueSize: 64,
		Handler: func(shardcast.Message) { <-gate },
	}})
	pub := newBroker(t, Config{Addrs: addrs(servers...)})
	const ch, n = "lag:slow", 10
	require.NoError(t, sub.Subscribe(ctx, ch))
	for range n {
		require.NoError(t, pub.Publish(ctx, ch, []byte("x")))
	}
	// One message is in the handler, the rest wait behind it.
	waitFor(t, "the backlog", func() bool { return sub.Stats().QueueDepth == n-1 })
	assert.Equal(t, n-1, sub.Stats().QueueHighWater)

	release()
	waitFor(t, "the drain", func() bool { return sub.Stats().Delivered == n })
	st := sub.Stats()
	assert.Zero(t, st.QueueDepth)
	assert.Equal(t, n-1, st.QueueHighWater)
	// The stuck call is timed, and the first of the drained batch; fast
	// calls after it are sampled.
	hc := sub.Latency().HandlerTime.Count
	assert.GreaterOrEqual(t, hc, uint64(2))
	assert.LessOrEqual(t, hc, uint64(n))
}
