package sharded

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/brokertest"
	"github.com/shardcast/shardcast/redistest"
)

// asyncOutcomes counts, per call, the done calls of PublishAsync and
// keeps the last outcome.
type asyncOutcomes struct {
	mu   sync.Mutex
	n    []int
	errs []error
}

// publish runs PublishAsync with a done of its own and returns the call's
// number and PublishAsync's error.
func (o *asyncOutcomes) publish(ctx context.Context, b *Broker, channel string, payload []byte) (int, error) {
	o.mu.Lock()
	i := len(o.n)
	o.n, o.errs = append(o.n, 0), append(o.errs, nil)
	o.mu.Unlock()
	return i, b.PublishAsync(ctx, channel, payload, func(err error) {
		o.mu.Lock()
		o.n[i]++
		o.errs[i] = err
		o.mu.Unlock()
	})
}

// calls returns a copy of the done counts and outcomes.
func (o *asyncOutcomes) calls() ([]int, []error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]int(nil), o.n...), append([]error(nil), o.errs...)
}

// TestPublishAsyncDelivers: concurrent goroutines, each on channels of
// its own over three instances, mix PublishAsync and Publish; every done
// hears nil once, Stats.Published counts both forms, and each channel's
// messages arrive once each, in call order.
func TestPublishAsyncDelivers(t *testing.T) {
	const goroutines, each = 8, 300
	servers := startServers(t, 3)
	rec := newRecorder()
	sub := newBroker(t, Config{Addrs: addrs(servers...), Options: shardcast.Options{Handler: rec.handle, QueueSize: 8192}})
	pub := newBroker(t, Config{Addrs: addrs(servers...), Options: shardcast.Options{MaxAsyncPublishes: 64}})
	chans := channelNames("async:", goroutines*2)
	ctx := context.Background()
	require.NoError(t, sub.Subscribe(ctx, chans...))

	var o asyncOutcomes
	var syncN atomic.Int64
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				ch := chans[2*g+i%2]
				payload := []byte(strconv.Itoa(i))
				if i%10 == 9 {
					if !assert.NoError(t, pub.Publish(ctx, ch, payload)) {
						return
					}
					syncN.Add(1)
					continue
				}
				if _, err := o.publish(ctx, pub, ch, payload); !assert.NoError(t, err) {
					return
				}
			}
		})
	}
	wg.Wait()
	waitFor(t, "every done", func() bool {
		n, _ := o.calls()
		for _, c := range n {
			if c == 0 {
				return false
			}
		}
		return true
	})
	n, errs := o.calls()
	for i := range n {
		assert.Equal(t, 1, n[i], "call %d: done calls", i)
		assert.NoError(t, errs[i], "call %d", i)
	}
	total := len(n) + int(syncN.Load())
	assert.Equal(t, uint64(total), pub.Stats().Published)
	assert.Equal(t, goroutines*each, total)
	waitFor(t, "every message", func() bool { return len(rec.missing(chans, each/2)) == 0 })
	for _, ch := range chans {
		msgs := rec.get(ch)
		require.Len(t, msgs, each/2, ch)
		last := -1
		for _, m := range msgs {
			v, err := strconv.Atoi(string(m.Payload))
			require.NoError(t, err)
			require.Greater(t, v, last, "%s: %d after %d", ch, v, last)
			last = v
			assert.False(t, m.PublishedAt.IsZero(), "enveloped and stamped")
		}
	}
}

// TestPublishAsyncChecks: PublishAsync refuses what Publish refuses, with
// the same errors, and then never calls done.
func TestPublishAsyncChecks(t *testing.T) {
	s := redistest.StartStandalone(t)
	b, err := New(Config{Addrs: addrs(s), Options: shardcast.Options{MaxPayload: 8}})
	require.NoError(t, err)
	var o asyncOutcomes
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	ctx := context.Background()
	for name, c := range map[string]struct {
		ctx     context.Context
		channel string
		payload []byte
		want    error
	}{
		"empty channel":     {ctx, "", nil, shardcast.ErrInvalidChannel},
		"payload too large": {ctx, "a", make([]byte, 9), shardcast.ErrPayloadTooLarge},
		"cancelled ctx":     {cancelled, "a", nil, context.Canceled},
	} {
		_, err := o.publish(c.ctx, b, c.channel, c.payload)
		assert.ErrorIs(t, err, c.want, name)
		assert.ErrorIs(t, b.Publish(c.ctx, c.channel, c.payload), c.want, "%s: as Publish", name)
	}
	require.NoError(t, b.Close())
	_, err = o.publish(ctx, b, "a", nil)
	assert.ErrorIs(t, err, shardcast.ErrClosed)
	n, _ := o.calls()
	assert.Equal(t, make([]int, len(n)), n, "no done called for a refused call")
	assert.Zero(t, b.Stats().Published)

	_, err = New(Config{Addrs: addrs(s), Options: shardcast.Options{MaxAsyncPublishes: -1}})
	assert.ErrorIs(t, err, shardcast.ErrInvalidConfig)
}

// TestPublishAsyncLimit: with MaxAsyncPublishes in flight against a
// frozen instance, the next call waits for room: its ctx ends the wait
// (not sent, done never called), and so does Close (ErrClosed). Close
// calls every in-flight done, with ErrClosed, before it returns.
func TestPublishAsyncLimit(t *testing.T) {
	const limit = 4
	s := redistest.StartStandalone(t)
	b, err := New(Config{Addrs: addrs(s), Options: shardcast.Options{MaxAsyncPublishes: limit}})
	require.NoError(t, err)
	require.NoError(t, s.Pause())
	t.Cleanup(func() { _ = s.Resume() })
	ctx := context.Background()
	var o asyncOutcomes
	for i := range limit {
		_, err := o.publish(ctx, b, "l", []byte(strconv.Itoa(i)))
		require.NoError(t, err)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err = o.publish(short, b, "l", []byte("over"))
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.ErrorIs(t, err, shardcast.ErrNotSent)

	waiting := make(chan error, 1)
	go func() {
		_, err := o.publish(ctx, b, "l", []byte("waits"))
		waiting <- err
	}()
	waitFor(t, "a call waiting for room", func() bool {
		return strings.Contains(brokertest.Stacks(), "(*AsyncRoom).Take(")
	})
	require.NoError(t, b.Close())
	select {
	case err := <-waiting:
		assert.ErrorIs(t, err, shardcast.ErrClosed)
	case <-time.After(waitTimeout):
		t.Fatal("Close left a call waiting for room")
	}
	n, errs := o.calls()
	require.Len(t, n, limit+2)
	for i := range limit {
		assert.Equal(t, 1, n[i], "call %d: done ran once before Close returned", i)
		assert.ErrorIs(t, errs[i], shardcast.ErrClosed, "call %d", i)
	}
	assert.Equal(t, []int{0, 0}, n[limit:], "refused calls hear nothing")
	assert.Zero(t, b.Stats().Published)
}

// TestPublishAsyncWaiterGetsRoom: with MaxAsyncPublishes in flight against
// a frozen instance, calls beyond wait; once the instance answers, the
// room the replies free lets every waiting call in, and all are
// published.
func TestPublishAsyncWaiterGetsRoom(t *testing.T) {
	const limit, waiters = 2, 3
	s := redistest.StartStandalone(t)
	b := newBroker(t, Config{Addrs: addrs(s), Options: shardcast.Options{MaxAsyncPublishes: limit}})
	ctx := context.Background()
	require.NoError(t, b.Publish(ctx, "w", []byte("dial")))
	require.NoError(t, s.Pause())
	t.Cleanup(func() { _ = s.Resume() })
	var o asyncOutcomes
	for i := range limit {
		_, err := o.publish(ctx, b, "w", []byte(strconv.Itoa(i)))
		require.NoError(t, err)
	}
	errs := make(chan error, waiters)
	for i := range waiters {
		go func() {
			_, err := o.publish(ctx, b, "w", []byte(strconv.Itoa(limit+i)))
			errs <- err
		}()
	}
	waitFor(t, "calls waiting for room", func() bool {
		return strings.Count(brokertest.Stacks(), "(*AsyncRoom).Take(") == waiters
	})
	require.NoError(t, s.Resume())
	for range waiters {
		select {
		case err := <-errs:
			require.NoError(t, err)
		case <-time.After(waitTimeout):
			t.Fatal("a call still waits for room after the replies came")
		}
	}
	waitFor(t, "every done", func() bool { return b.Stats().Published == 1+limit+waiters })
	n, outcomes := o.calls()
	for i := range n {
		assert.Equal(t, 1, n[i], "call %d: done calls", i)
		assert.NoError(t, outcomes[i], "call %d", i)
	}
}
