package cluster

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/redistest"
)

// asyncLog records, per channel, the outcome of every PublishAsync call:
// how many times its done ran and with what.
type asyncLog struct {
	mu   sync.Mutex
	runs map[string][]int
	errs map[string][]error
}

func newAsyncLog() *asyncLog {
	return &asyncLog{runs: map[string][]int{}, errs: map[string][]error{}}
}

// publish sends message seq (1, 2, …, in call order per channel) and
// returns PublishAsync's error.
func (o *asyncLog) publish(ctx context.Context, b *Broker, channel string) error {
	o.mu.Lock()
	seq := len(o.runs[channel]) + 1
	o.runs[channel] = append(o.runs[channel], 0)
	o.errs[channel] = append(o.errs[channel], nil)
	o.mu.Unlock()
	err := b.PublishAsync(ctx, channel, []byte(strconv.Itoa(seq)), func(err error) {
		o.mu.Lock()
		o.runs[channel][seq-1]++
		o.errs[channel][seq-1] = err
		o.mu.Unlock()
	})
	if err != nil {
		o.mu.Lock()
		o.runs[channel][seq-1] = -1 // refused: done never runs
		o.errs[channel][seq-1] = err
		o.mu.Unlock()
	}
	return err
}

// settled reports whether every queued call heard its outcome.
func (o *asyncLog) settled() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, runs := range o.runs {
		for _, n := range runs {
			if n == 0 {
				return false
			}
		}
	}
	return true
}

// check asserts that every queued call's done ran exactly once, that no
// message was delivered twice, and that no message reported as not sent
// was delivered. It returns the counts of calls, failures, failures
// reported as not sent, and deliveries out of call order.
func (o *asyncLog) check(t *testing.T, rec *recorder) (calls, failed, notSent, reordered int) {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	for ch, runs := range o.runs {
		var last uint64
		delivered := map[uint64]bool{}
		for _, s := range rec.seqs(ch) {
			assert.False(t, delivered[s], "%s: #%d delivered twice", ch, s)
			if s < last {
				reordered++
			}
			last = max(last, s)
			delivered[s] = true
		}
		for i, n := range runs {
			calls++
			if n == -1 {
				continue
			}
			assert.Equal(t, 1, n, "%s: done of #%d ran %d times", ch, i+1, n)
			if err := o.errs[ch][i]; err != nil {
				failed++
				if errors.Is(err, shardcast.ErrNotSent) {
					notSent++
					assert.False(t, delivered[uint64(i+1)], "%s: #%d was reported not sent, and delivered: %v", ch, i+1, err)
				}
			}
		}
	}
	return calls, failed, notSent, reordered
}

// TestPublishAsync: goroutines, each on channels of its own over three
// masters, mix PublishAsync and Publish; every done hears nil once,
// Stats.Published counts both forms, and each channel's messages arrive
// once each, in call order.
func TestPublishAsync(t *testing.T) {
	c := redistest.StartCluster(t, 3, 0)
	rec := newRecorder()
	sub := newBroker(t, Config{Addrs: c.Seeds(), Options: shardcast.Options{Handler: rec.handle, QueueSize: 8192}})
	pub := newBroker(t, Config{Addrs: c.Seeds(), Options: shardcast.Options{MaxAsyncPublishes: 64}})
	chans := channelsPerPartition(sub.Layout(), 1, "async.")[:48]
	ctx := testCtx(t, 60*time.Second)
	require.NoError(t, sub.Subscribe(ctx, chans...))

	o := newAsyncLog()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 300 {
				ch := chans[6*g+i%6]
				assert.NoError(t, o.publish(ctx, pub, ch))
			}
		})
	}
	wg.Wait()
	require.True(t, waitFor(20*time.Second, o.settled), "some done never ran")
	require.True(t, waitFor(20*time.Second, func() bool { return sub.Stats().Delivered == 8*300 }),
		"delivered %d of %d", sub.Stats().Delivered, 8*300)
	calls, failed, _, reordered := o.check(t, rec)
	assert.Equal(t, 8*300, calls)
	assert.Zero(t, failed)
	assert.Zero(t, reordered, "with no fault, each channel's messages arrive in call order")
	assert.EqualValues(t, 8*300, pub.Stats().Published)

	// Arguments are checked as Publish checks them; done never runs then.
	assert.ErrorIs(t, pub.PublishAsync(ctx, "", nil, func(error) { t.Error("done ran for a refused call") }), shardcast.ErrInvalidChannel)
	require.NoError(t, pub.Close())
	assert.ErrorIs(t, pub.PublishAsync(ctx, "x", nil, func(error) { t.Error("done ran for a refused call") }), shardcast.ErrClosed)
}

// TestPublishAsyncAcrossMoves: messages kept in flight with PublishAsync
// while a slot migrates and a master fails over. The broker does not
// resend what a move refused (that would put it behind later messages):
// those calls hear an error wrapping ErrNotSent and are never delivered;
// every done runs once; no message is delivered twice; and publishing
// goes on on the new masters. Order across the failover is not promised
// (see Broker.PublishAsync): messages in flight on the demoted master can
// run after later ones sent to its successor; the figure counts them (1
// of ~80,000 calls was seen in CI).
func TestPublishAsyncAcrossMoves(t *testing.T) {
	c := redistest.StartCluster(t, 3, 1)
	rec := newRecorder()
	sub := newBroker(t, Config{Addrs: c.Seeds(), Options: shardcast.Options{Handler: rec.handle, QueueSize: 1 << 16}})
	pub := newBroker(t, Config{Addrs: c.Seeds()})
	l := sub.Layout()
	chans := channelsPerPartition(l, 1, "moves.")
	ctx := testCtx(t, 90*time.Second)
	require.NoError(t, sub.Subscribe(ctx, chans...))

	o := newAsyncLog()
	var stop atomic.Bool
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				_ = o.publish(ctx, pub, chans[(4*i+g)%len(chans)])
				if i%64 == 63 {
					time.Sleep(time.Millisecond)
				}
			}
		})
	}
	time.Sleep(200 * time.Millisecond)

	masters, err := c.Masters(ctx)
	require.NoError(t, err)
	part := 0
	from, err := c.MasterOfSlot(ctx, l.Slot(part))
	require.NoError(t, err)
	to := masters[0]
	if to.Addr() == from.Addr() {
		to = masters[1]
	}
	require.NoError(t, c.MoveSlot(ctx, l.Slot(part), to))
	time.Sleep(300 * time.Millisecond)

	replicas, err := c.ReplicasOf(ctx, to)
	require.NoError(t, err)
	require.NotEmpty(t, replicas)
	_, err = replicas[0].Do(ctx, "CLUSTER", "FAILOVER")
	require.NoError(t, err)
	require.True(t, waitFor(30*time.Second, func() bool { return sub.masterOf(part) == replicas[0].Addr() }),
		"the subscriber never followed the failover")
	after := pub.Stats().Published
	require.True(t, waitFor(30*time.Second, func() bool { return pub.Stats().Published > after+1000 }),
		"publishing did not go on after the moves")
	stop.Store(true)
	wg.Wait()
	require.True(t, waitFor(30*time.Second, o.settled), "some done never ran")
	time.Sleep(500 * time.Millisecond) // the last deliveries
	calls, failed, notSent, reordered := o.check(t, rec)
	t.Logf("FIGURE async across a slot move and a failover: %d calls, %d failed (%d reported not sent, none delivered), %d delivered, %d out of call order, %d stale copies dropped",
		calls, failed, notSent, sub.Stats().Delivered, reordered, sub.Stats().Stale)
	assert.Positive(t, calls)
}
