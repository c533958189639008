package pubconn

import (
	"context"
	"errors"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardcast/shardcast/internal/subconn"
	"github.com/shardcast/shardcast/redistest"
)

// TestServerKilled: calls waiting for replies when the server dies fail,
// publishes during the outage fail without hanging, and the first publish
// after the restart redials.
func TestServerKilled(t *testing.T) {
	const waiting = 8
	s := redistest.StartStandalone(t)
	p := newPub(t, subconn.Dialer{Addr: s.Addr()}, 5*time.Second)
	ctx := testCtx(t)
	require.NoError(t, p.Publish(ctx, "k", []byte("before"), true, time.Time{}))

	// Freeze the server so that the calls are surely waiting when it dies.
	require.NoError(t, s.Pause())
	var dones []<-chan error
	for range waiting {
		dones = append(dones, publishAsync(ctx, p, "k", []byte("during")))
	}
	waitFor(t, "calls written", func() bool { return written(p) == waiting })
	require.NoError(t, s.Kill())
	for i, done := range dones {
		err := requireReturns(t, done, "waiting call")
		require.Error(t, err, "call %d", i)
		assert.NotErrorIs(t, err, context.DeadlineExceeded, "call %d failed by the wire, not by its ctx", i)
		assert.NotErrorIs(t, err, ErrNotSent, "call %d was written, so it may have run", i)
	}

	// Outage: concurrent callers all fail (their dial fails: ErrNotSent),
	// none hangs.
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 20 {
				err := p.Publish(ctx, "k", []byte("down"), true, time.Time{})
				if !assert.ErrorIs(t, err, ErrNotSent) || !assert.NotErrorIs(t, err, context.DeadlineExceeded) {
					return
				}
			}
		})
	}
	wg.Wait()

	require.NoError(t, s.Restart(ctx))
	col := subscribe(t, s, "k")
	require.NoError(t, p.Publish(ctx, "k", []byte("after"), true, time.Time{}), "the next publish redials")
	waitFor(t, "message after restart", func() bool { return col.len() == 1 })
	assert.Equal(t, "after", string(col.all()[0].payload))
}

// TestFrozenServer: a frozen server holds replies; callers leave at their
// ctx's end, and the wire stays in step for the calls after Resume.
func TestFrozenServer(t *testing.T) {
	s := redistest.StartStandalone(t)
	col := subscribe(t, s, "f")
	p := newPub(t, subconn.Dialer{Addr: s.Addr()}, 5*time.Second)
	require.NoError(t, p.Ping(testCtx(t)))

	thaw := freeze(t, s)
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			err := p.Publish(ctx, "f", []byte("abandoned "+strconv.Itoa(i)), true, time.Time{})
			assert.ErrorIs(t, err, context.DeadlineExceeded)
		})
	}
	wg.Wait()
	thaw()

	ctx := testCtx(t)
	for i := range 5 {
		require.NoError(t, p.Publish(ctx, "f", []byte("after "+strconv.Itoa(i)), true, time.Time{}))
	}
	waitFor(t, "every message", func() bool { return col.len() >= 15 })
	got := col.all()
	require.Len(t, got, 15, "the abandoned publishes were sent, the later ones follow them")
	for i, m := range got[10:] {
		assert.Equal(t, "after "+strconv.Itoa(i), string(m.payload))
	}
}

// TestBacklogWhilePaused: against a server that stopped reading, large
// publishes end with ErrBacklog or the write deadline, never hang, and
// the wire keeps no more than MaxBacklog queued behind a blocked write.
func TestBacklogWhilePaused(t *testing.T) {
	const publishers = 16
	s := redistest.StartStandalone(t)
	p := newPub(t, subconn.Dialer{Addr: s.Addr()}, 500*time.Millisecond)
	require.NoError(t, p.Ping(testCtx(t)))

	thaw := freeze(t, s)
	payload := make([]byte, 1<<20)
	ctx := testCtx(t)
	var stop atomic.Bool
	firstErr := make(chan error, publishers)
	errs := make([][]error, publishers)
	var maxBuf atomic.Int64
	var wg sync.WaitGroup
	for g := range publishers {
		wg.Go(func() {
			for !stop.Load() {
				err := p.Publish(ctx, "b", payload, true, time.Time{})
				if err != nil {
					errs[g] = append(errs[g], err)
					firstErr <- err
					return
				}
			}
		})
	}
	// Sample the unsent backlog while the callers run.
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for !stop.Load() {
			p.mu.Lock()
			w := p.w
			p.mu.Unlock()
			if w != nil {
				w.mu.Lock()
				if n := int64(len(w.buf)); n > maxBuf.Load() {
					maxBuf.Store(n)
				}
				w.mu.Unlock()
			}
			runtime.Gosched()
		}
	}()

	var first error
	select {
	case first = <-firstErr:
	case <-time.After(waitTimeout):
		t.Fatalf("no publish failed within %v against a paused server", waitTimeout)
	}
	stop.Store(true)
	<-sampled
	// Callers that went out on a fresh wire after the failure wait for
	// replies the paused server holds back: let it answer.
	thaw()
	wg.Wait()

	isBound := func(err error) bool {
		return errors.Is(err, ErrBacklog) || errors.Is(err, os.ErrDeadlineExceeded)
	}
	assert.True(t, isBound(first), "the first failure is the backlog bound or the write deadline: %v", first)
	for g, list := range errs {
		for _, err := range list {
			assert.True(t, isBound(err), "publisher %d: %v", g, err)
		}
	}
	assert.LessOrEqual(t, maxBuf.Load(), int64(MaxBacklog+len(payload)+64), "unsent bytes stay bounded")
	require.NoError(t, p.Publish(testCtx(t), "b", []byte("alive"), true, time.Time{}))
	p.Close()
}

// TestWriteDeadline: a write blocked by a server that stopped reading
// ends at the write deadline, and the calls queued on the wire fail with
// that cause rather than a bare "connection closed".
func TestWriteDeadline(t *testing.T) {
	// 48 MiB offered: more than the socket buffers and MaxBacklog hold.
	const publishers = 48
	s := redistest.StartStandalone(t)
	// No reply timeout: only the write deadline can end these calls.
	p := newPubWith(t, subconn.Dialer{Addr: s.Addr()}, Timeouts{Write: 500 * time.Millisecond})
	require.NoError(t, p.Ping(testCtx(t)))
	thaw := freeze(t, s)

	payload := make([]byte, 1<<20)
	ctx := testCtx(t)
	errs := make([]error, publishers)
	var deadlines atomic.Int64
	var wg sync.WaitGroup
	for g := range publishers {
		wg.Go(func() {
			errs[g] = p.Publish(ctx, "w", payload, true, time.Time{})
			if errors.Is(errs[g], os.ErrDeadlineExceeded) {
				deadlines.Add(1)
			}
		})
	}
	waitFor(t, "a publish failed by the write deadline", func() bool { return deadlines.Load() > 0 })
	// A caller the scheduler started only after the wire was dropped
	// went out on a new wire and waits for the server's reply.
	thaw()
	wg.Wait()

	for g, err := range errs {
		if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) && !errors.Is(err, ErrBacklog) {
			t.Errorf("publisher %d: want ErrBacklog or the write deadline, got %v", g, err)
		}
	}
	require.NoError(t, p.Publish(testCtx(t), "w", []byte("alive"), true, time.Time{}), "a new wire after the resume")
}

// TestSilentWireIsDropped: a server that stops answering without closing
// the socket (SIGSTOP here; a silent network path alike) must not keep a
// publish waiting forever, even one whose ctx never ends: once the oldest
// unanswered command is older than the write timeout the wire is dropped,
// the waiting calls fail with the deadline as cause (not ErrNotSent: they
// were sent), and the next Publish dials a new connection, which works once
// the server answers.
func TestSilentWireIsDropped(t *testing.T) {
	s := redistest.StartStandalone(t)
	// The write timeout is far away: only the reply timeout can drop it.
	p := newPubWith(t, subconn.Dialer{Addr: s.Addr()}, Timeouts{Write: time.Hour, Reply: 300 * time.Millisecond})
	require.NoError(t, p.Ping(testCtx(t)))
	p.mu.Lock()
	first := p.w
	p.mu.Unlock()
	require.NotNil(t, first)

	thaw := freeze(t, s)
	waiting := make(chan error, 1)
	go func() { waiting <- p.Publish(context.Background(), "silent", []byte("w"), true, time.Time{}) }()
	select {
	case err := <-waiting:
		require.ErrorIs(t, err, os.ErrDeadlineExceeded, "the waiting call fails with the silence as cause")
		assert.NotErrorIs(t, err, ErrNotSent, "its command was sent; whether it ran is unknown")
	case <-time.After(waitTimeout):
		t.Fatal("a publish without a deadline waited on the silent wire forever")
	}

	thaw()
	require.NoError(t, p.Publish(testCtx(t), "silent", []byte("after"), true, time.Time{}))
	p.mu.Lock()
	second := p.w
	p.mu.Unlock()
	assert.NotSame(t, first, second, "the Pub dialled a new connection")
}
