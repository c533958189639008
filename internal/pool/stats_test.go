package pool

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/shardcast/shardcast/internal/hist"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// TestPoolRecordsLag: a message published a second ago has a lag of
// at least a second; one from the future (a publisher whose clock is
// ahead) is counted as negative; one without PublishedAt is not in the lag
// histogram at all. Fast handler calls are sampled: at least the first of
// the batch, at most every one.
func TestPoolRecordsLag(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	pool := newTestPool(2, 16, nil, nil)
	defer pool.Close()
	now := time.Now()
	require.True(t, pool.Submit(Message{Channel: "old", PublishedAt: now.Add(-time.Second)}))
	require.True(t, pool.Submit(Message{Channel: "future", PublishedAt: now.Add(time.Hour)}))
	require.True(t, pool.Submit(Message{Channel: "raw"}))
	wptWaitUntil(t, "three deliveries", func() bool { return pool.Delivered() == 3 })

	lag, handling := pool.Latency()
	assert.EqualValues(t, 1, lag.Count, "the raw message has no lag")
	assert.GreaterOrEqual(t, lag.Sum, time.Second)
	for _, b := range lag.Buckets[:hist.Index(int64(time.Second-time.Second*32/1000))] {
		assert.Zero(t, b.Count, "a second-old message's lag, within the buckets' resolution: bucket [%v, %v)", b.Lower, b.Upper)
	}
	assert.EqualValues(t, 1, lag.Negative)
	assert.Equal(t, -hist.Max, lag.NegativeSum, "an hour ahead counts as hist.Max")
	assert.GreaterOrEqual(t, handling.Count, uint64(1))
	assert.LessOrEqual(t, handling.Count, uint64(3))
}

// TestPoolRecordsHandlerTime: a handler that sleeps 5 ms is
// recorded as taking at least that long, every call of it (a call of 2µs
// or more makes the worker time every call); a panicking one is not
// recorded, and the call after it is timed.
func TestPoolRecordsHandlerTime(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	const nap = 5 * time.Millisecond
	pool := newTestPool(1, 16, func(m Message) {
		if m.Channel == "bad" {
			panic("boom")
		}
		time.Sleep(nap) // the duration under test, not a synchronisation
	}, nil)
	defer pool.Close()
	require.True(t, pool.Submit(Message{Channel: "bad", PublishedAt: time.Now()}))
	for range 3 {
		require.True(t, pool.Submit(Message{Channel: "slow", PublishedAt: time.Now()}))
	}
	wptWaitUntil(t, "three deliveries", func() bool { return pool.Delivered() == 3 })

	lag, handling := pool.Latency()
	assert.EqualValues(t, 3, handling.Count, "the panicking call is not timed")
	assert.GreaterOrEqual(t, handling.Sum, 3*nap)
	for _, b := range handling.Buckets[:hist.Index(int64(nap))] {
		assert.Zero(t, b.Count, "no call timed below the %v it slept: bucket [%v, %v)", nap, b.Lower, b.Upper)
	}
	assert.EqualValues(t, 4, lag.Count, "lag is taken before the handler, panicking or not")
}

// TestPoolSamplesABacklog: a backlog of fast calls is taken in
// batches; the first call of each batch and about one in 8 after it are
// timed (every one, in a batch where a call took 2µs or more, which a
// loaded -race run may see), the stuck first call too.
func TestPoolSamplesABacklog(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	const n = 200
	pool, release := wptBlockedPool(t, n, nil)
	defer pool.Close()
	release()
	wptWaitUntil(t, "the backlog", func() bool { return pool.Delivered() == n+1 })
	lag, handling := pool.Latency()
	assert.GreaterOrEqual(t, handling.Count, uint64((n+1)/lagEvery), "one in 8 at least")
	assert.Zero(t, lag.Count, "the messages carry no PublishedAt")
}

// TestPoolQueueDepth: messages queued behind a stuck handler show in
// QueueDepth, and the high-water mark keeps the deepest backlog after it
// drained.
func TestPoolQueueDepth(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	pool, release := wptBlockedPool(t, 5, nil)
	defer pool.Close()
	defer release()
	assert.Equal(t, 5, pool.QueueDepth())
	assert.Equal(t, 5, pool.QueueHighWater(), "the stuck worker has not measured its backlog; the queue length covers it")

	release()
	wptWaitUntil(t, "the backlog", func() bool { return pool.Delivered() == 6 })
	assert.Zero(t, pool.QueueDepth())
	assert.Equal(t, 5, pool.QueueHighWater(), "the worker saw 5 messages queued when it took the first of them")
}

// TestPoolQueueDepthSumsWorkers: QueueDepth adds up every worker's
// queue, while QueueHighWater is the deepest single queue.
func TestPoolQueueDepthSumsWorkers(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	gate := make(chan struct{})
	var entered atomic.Int64
	pool := newTestPool(4, 64, func(Message) {
		entered.Add(1)
		<-gate
	}, nil)
	defer pool.Close()
	defer close(gate)
	// One channel per worker: find them by where the pool routes them.
	perWorker := map[int]string{}
	for i := 0; len(perWorker) < 4; i++ {
		ch := fmt.Sprintf("c%d", i)
		w := int(xxhash.Sum64String(ch) % 4)
		if _, ok := perWorker[w]; !ok {
			perWorker[w] = ch
		}
	}
	for _, ch := range perWorker {
		require.True(t, pool.Submit(Message{Channel: ch}))
	}
	wptWaitUntil(t, "every worker stuck", func() bool { return entered.Load() == 4 })
	for w, ch := range perWorker {
		for range w + 1 { // worker w gets w+1 queued messages
			require.True(t, pool.Submit(Message{Channel: ch}))
		}
	}
	assert.Equal(t, 1+2+3+4, pool.QueueDepth())
	assert.Equal(t, 4, pool.QueueHighWater())
}

// TestPoolDeliveryDoesNotAllocate: submitting and handling, with
// the recording, allocate nothing (AllocsPerRun counts the workers'
// allocations too, since it reads the process's totals).
func TestPoolDeliveryDoesNotAllocate(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	var handled atomic.Int64
	pool := newTestPool(2, 2048, func(Message) { handled.Add(1) }, nil)
	defer pool.Close()
	now := time.Now()
	var sent int64
	allocs := testing.AllocsPerRun(1000, func() {
		pool.Submit(Message{Channel: "a", PublishedAt: now})
		sent++
		// Wait for the handler inside the run, so that the worker's
		// allocations, if any, are counted.
		for handled.Load() < sent {
			runtime.Gosched()
		}
	})
	assert.Zero(t, allocs)
	lag, _ := pool.Latency()
	assert.Positive(t, lag.Count)
}
