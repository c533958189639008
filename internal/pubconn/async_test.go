package pubconn

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardcast/shardcast/internal/resp"
	"github.com/shardcast/shardcast/internal/subconn"
	"github.com/shardcast/shardcast/redistest"
)

// outcomes records, per call of PublishAsync, whether it was queued and
// every call of its done, so that a test can check that each queued call
// hears its outcome exactly once and a refused one never.
type outcomes struct {
	mu     sync.Mutex
	done   []int   // done calls per call
	errs   []error // the last outcome passed to done
	queued []bool  // PublishAsync returned nil
	refuse []error // what PublishAsync returned otherwise
}

// publish runs one PublishAsync (SPublishAsync with a keyPrefix) and
// returns its number and error.
func (o *outcomes) publish(ctx context.Context, p *Pub, keyPrefix, channel string, payload []byte) (int, error) {
	o.mu.Lock()
	i := len(o.done)
	o.done = append(o.done, 0)
	o.errs = append(o.errs, nil)
	o.queued = append(o.queued, false)
	o.refuse = append(o.refuse, nil)
	o.mu.Unlock()
	done := func(err error) {
		o.mu.Lock()
		o.done[i]++
		o.errs[i] = err
		o.mu.Unlock()
	}
	var err error
	if keyPrefix != "" {
		err = p.SPublishAsync(ctx, keyPrefix, channel, payload, true, time.Time{}, done)
	} else {
		err = p.PublishAsync(ctx, channel, payload, true, time.Time{}, done)
	}
	o.mu.Lock()
	o.queued[i], o.refuse[i] = err == nil, err
	o.mu.Unlock()
	return i, err
}

// answered reports how many queued calls heard their outcome, and how
// many were queued.
func (o *outcomes) answered() (answered, queued int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for i, q := range o.queued {
		if q {
			queued++
			if o.done[i] > 0 {
				answered++
			}
		}
	}
	return answered, queued
}

// check fails the test unless every queued call's done ran exactly once
// and no refused call's done ran; call it after the Pub's Close, once no
// more done can come. It returns the outcomes of the queued calls.
func (o *outcomes) check(t *testing.T) []error {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []error
	for i, q := range o.queued {
		switch {
		case q && o.done[i] != 1:
			t.Errorf("call %d: done called %d times, want 1", i, o.done[i])
		case !q && o.done[i] != 0:
			t.Errorf("call %d refused (%v), yet done called %d times", i, o.refuse[i], o.done[i])
		case !q:
			assert.ErrorIs(t, o.refuse[i], ErrNotSent, "call %d: a refused call was not sent", i)
		}
		if q {
			out = append(out, o.errs[i])
		}
	}
	return out
}

// TestPublishAsyncMixedOrder: concurrent callers mixing PublishAsync,
// Publish and Ping on one Pub, against a server that refuses some
// channels: each call gets the reply to its own command (NOPERM exactly
// for the refused channels), done runs once per call, and each caller's
// messages arrive in call order.
func TestPublishAsyncMixedOrder(t *testing.T) {
	const callers, each = 16, 400
	s := redistest.StartStandalone(t, aclUser("&ok:*"))
	chans := make([]string, callers)
	for g := range chans {
		chans[g] = "ok:" + strconv.Itoa(g)
	}
	col := subscribe(t, s, chans...)
	p := New(withAddr(appUser, s), Timeouts{Write: 5 * time.Second, Reply: 5 * time.Second})
	ctx := testCtx(t)
	before := publishCalls(t, s)

	var o outcomes
	var refusedWant sync.Map // call number → true for a refused channel
	var syncOK atomic.Int64
	var wg sync.WaitGroup
	for g := range callers {
		wg.Go(func() {
			for i := range each {
				payload := []byte(fmt.Sprintf("%d/%d", g, i))
				switch {
				case i%7 == 3:
					err := p.Publish(ctx, chans[g], payload, true, time.Time{})
					if !assert.NoError(t, err) {
						return
					}
					syncOK.Add(1)
				case i%11 == 5:
					n, err := o.publish(ctx, p, "", "no:"+strconv.Itoa(g), []byte("x"))
					if !assert.NoError(t, err) {
						return
					}
					refusedWant.Store(n, true)
				case i%50 == 0:
					if !assert.NoError(t, p.Ping(ctx)) {
						return
					}
					fallthrough
				default:
					if _, err := o.publish(ctx, p, "", chans[g], payload); !assert.NoError(t, err) {
						return
					}
				}
			}
		})
	}
	wg.Wait()
	waitFor(t, "every outcome", func() bool { a, q := o.answered(); return a == q })
	p.Close()
	errs := o.check(t)
	var asyncOK int64
	for i, err := range errs {
		if _, refused := refusedWant.Load(i); refused {
			se, ok := resp.IsServerError(err)
			if assert.True(t, ok, "call %d to a refused channel: want NOPERM, got %v", i, err) {
				assert.Contains(t, se.Msg, "NOPERM")
			}
			continue
		}
		if assert.NoError(t, err, "call %d", i) {
			asyncOK++
		}
	}
	assert.Equal(t, asyncOK+syncOK.Load(), int64(p.Published()), "Published counts the successes of both forms")
	assert.Equal(t, asyncOK+syncOK.Load(), publishCalls(t, s)-before, "Redis ran every permitted publish once")

	want := int(asyncOK + syncOK.Load())
	waitFor(t, "every message", func() bool { return col.len() >= want })
	next := make(map[string]int)
	for _, m := range col.all() {
		g, i, _ := strings.Cut(string(m.payload), "/")
		n, _ := strconv.Atoi(i)
		require.Equal(t, "ok:"+g, m.channel)
		require.Greater(t, n+1, next[g], "caller %s: message %d after %d", g, n, next[g]-1)
		next[g] = n + 1
	}
	assert.Len(t, col.all(), want)
}

// TestPublishAsyncServerKilled: while callers keep PublishAsync calls in
// flight, the server is killed and restarted twice. Every queued call's
// done runs exactly once; calls queued while it was down never reached it
// (refused at once, or failed as not sent), nor did calls that waited
// behind a frozen server's missing reply; after the restarts the Pub
// publishes again.
func TestPublishAsyncServerKilled(t *testing.T) {
	s := redistest.StartStandalone(t)
	p := New(subconn.Dialer{Addr: s.Addr()}, Timeouts{Write: 5 * time.Second, Reply: 5 * time.Second, Redial: 5 * time.Millisecond})
	t.Cleanup(p.Close)
	ctx := testCtx(t)
	require.NoError(t, p.Ping(ctx))

	// Freeze first, so that calls surely wait when the server dies.
	require.NoError(t, s.Pause())
	var o outcomes
	for i := range 32 {
		_, err := o.publish(ctx, p, "", "k", []byte("frozen "+strconv.Itoa(i)))
		require.NoError(t, err)
	}
	require.NoError(t, s.Kill())
	waitFor(t, "the frozen calls' outcomes", func() bool { a, q := o.answered(); return a == q })
	o.mu.Lock()
	for i, err := range o.errs {
		assert.Error(t, err, "call %d", i)
	}
	// The first call found nothing in flight and was written at once, so
	// it may have run. The others wait for its reply to go out together,
	// unless they joined its write while it was under way (a loaded host
	// lets several in while the writer yields): which of them left cannot
	// be told from outside, so only the first is judged.
	assert.NotErrorIs(t, o.errs[0], ErrNotSent, "call 0 was written before the kill, so it may have run")
	notSent := 0
	for _, err := range o.errs[1:] {
		if errors.Is(err, ErrNotSent) {
			notSent++
		}
	}
	t.Logf("%d of the %d calls behind the first were never written", notSent, len(o.errs)-1)
	o.mu.Unlock()

	var stop atomic.Bool
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				_, err := o.publish(ctx, p, "", "k", []byte(strconv.Itoa(g*1_000_000+i)))
				if err != nil || i%16 == 0 {
					// Bounds the calls recorded while the server is down.
					time.Sleep(time.Millisecond)
				}
			}
		})
	}
	for range 2 {
		base := p.Published()
		require.NoError(t, s.Restart(ctx))
		waitFor(t, "publishes on the restarted server", func() bool { return p.Published() > base+100 })
		require.NoError(t, s.Kill())
	}
	require.NoError(t, s.Restart(ctx))
	stop.Store(true)
	wg.Wait()
	waitFor(t, "every outcome", func() bool { a, q := o.answered(); return a == q })

	col := subscribe(t, s, "k")
	n, err := o.publish(ctx, p, "", "k", []byte("after"))
	if err != nil {
		// The last restart may still be in the redial delay.
		waitFor(t, "a publish after the restart", func() bool { n, err = o.publish(ctx, p, "", "k", []byte("after")); return err == nil })
	}
	waitFor(t, "the message after the restart", func() bool { return col.len() == 1 })
	assert.Equal(t, "after", string(col.all()[0].payload))
	p.Close()
	o.check(t)
	o.mu.Lock()
	assert.NoError(t, o.errs[n], "the publish after the restart")
	o.mu.Unlock()
}

// TestPublishAsyncSilentWire: a server stopped past the reply timeout
// gets its queued calls failed by the watchdog, with the deadline as
// cause, each done once: as ErrNotSent exactly for those that never left
// (waiting for a reply to go out with); the next call dials afresh and
// works once the server answers.
func TestPublishAsyncSilentWire(t *testing.T) {
	s := redistest.StartStandalone(t)
	p := New(subconn.Dialer{Addr: s.Addr()}, Timeouts{Write: time.Hour, Reply: 300 * time.Millisecond})
	t.Cleanup(p.Close)
	ctx := testCtx(t)
	require.NoError(t, p.Ping(ctx))

	thaw := freeze(t, s)
	var o outcomes
	for i := range 16 {
		_, err := o.publish(ctx, p, "", "silent", []byte(strconv.Itoa(i)))
		require.NoError(t, err)
	}
	waitFor(t, "the watchdog to fail the calls", func() bool { a, q := o.answered(); return a == q })
	thaw()
	col := subscribe(t, s, "silent")
	n, err := o.publish(ctx, p, "", "silent", []byte("after"))
	require.NoError(t, err, "the next call dials a new wire")
	waitFor(t, "the message after the thaw", func() bool { return col.len() >= 1 })
	p.Close()
	errs := o.check(t)
	for i, err := range errs[:16] {
		assert.ErrorIs(t, err, os.ErrDeadlineExceeded, "call %d", i)
	}
	// The first call was written at once; the others waited for its reply
	// to go out together, and never left. Unless the reader came late to
	// its write check after the Ping's reply (a descheduled goroutine):
	// it then wrote them all at once, and none is ErrNotSent.
	assert.NotErrorIs(t, errs[0], ErrNotSent, "call 0 was sent; whether it ran is unknown")
	notSent := 0
	for _, err := range errs[1:16] {
		if errors.Is(err, ErrNotSent) {
			notSent++
		}
	}
	assert.Contains(t, []int{0, 15}, notSent, "calls 1-15 go out together or not at all")
	assert.NoError(t, errs[n])
}

// TestPublishAsyncClose: Close fails the calls in flight (ErrClosed; as
// ErrNotSent exactly for those never written) and has run every done
// before it returns;
// later calls are refused with ErrClosed and ErrNotSent, their done never
// called.
func TestPublishAsyncClose(t *testing.T) {
	s := redistest.StartStandalone(t)
	p := New(subconn.Dialer{Addr: s.Addr()}, Timeouts{Write: 5 * time.Second, Reply: 5 * time.Second})
	ctx := testCtx(t)
	require.NoError(t, p.Ping(ctx))
	freeze(t, s)
	var o outcomes
	for i := range 16 {
		_, err := o.publish(ctx, p, "", "c", []byte(strconv.Itoa(i)))
		require.NoError(t, err)
		_, err = o.publish(ctx, p, "{t}.", "c", []byte(strconv.Itoa(i)))
		require.NoError(t, err)
	}
	p.Close()
	a, q := o.answered()
	require.Equal(t, q, a, "Close returned before every done ran")
	for i, err := range o.check(t) {
		assert.ErrorIs(t, err, ErrClosed, "call %d", i)
		// The first call was written at once; the others waited for its
		// reply to go out together, and never left.
		if i == 0 {
			assert.NotErrorIs(t, err, ErrNotSent, "call 0 was written, so it may have run")
		} else {
			assert.ErrorIs(t, err, ErrNotSent, "call %d", i)
		}
	}
	for _, prefix := range []string{"", "{t}."} {
		_, err := o.publish(ctx, p, prefix, "c", []byte("late"))
		assert.ErrorIs(t, err, ErrClosed)
		assert.ErrorIs(t, err, ErrNotSent)
	}
	o.check(t)
}

// TestPublishAsyncUnwritten: commands queued on a wire whose write fails
// before a byte left get an outcome wrapping ErrNotSent.
func TestPublishAsyncUnwritten(t *testing.T) {
	p := New(subconn.Dialer{Addr: "127.0.0.1:1"}, Timeouts{Write: time.Second, Reply: time.Second})
	w := &wire{nc: &failingConn{closed: make(chan struct{})}}
	p.mu.Lock()
	p.w = w
	p.wires.Add(1)
	p.mu.Unlock()
	go p.read(w)
	var o outcomes
	_, err := o.publish(testCtx(t), p, "", "c", []byte("x"))
	require.NoError(t, err)
	waitFor(t, "the outcome", func() bool { a, _ := o.answered(); return a == 1 })
	p.Close()
	errs := o.check(t)
	assert.ErrorIs(t, errs[0], ErrNotSent, "no byte of the command was written: %v", errs[0])
}

// TestPublishAsyncBacklog: against a server that stopped reading, calls
// past MaxBacklog are refused with ErrBacklog (and ErrNotSent), their done
// never called; once the server reads again it counts exactly the calls
// whose done said nil.
func TestPublishAsyncBacklog(t *testing.T) {
	const callers = 48 // 48 MiB: more than the socket buffers and MaxBacklog hold
	s := redistest.StartStandalone(t)
	// No deadline within the test: only the backlog bound refuses calls.
	p := New(subconn.Dialer{Addr: s.Addr()}, Timeouts{Write: 10 * time.Minute, Reply: 10 * time.Minute})
	t.Cleanup(p.Close)
	ctx := testCtx(t)
	require.NoError(t, p.Ping(ctx))
	before := publishCalls(t, s)
	thaw := freeze(t, s)

	payload := make([]byte, 1<<20)
	var o outcomes
	var refused atomic.Int64
	var wg sync.WaitGroup
	for range callers {
		// A caller that finds no write in progress does the write, which
		// blocks: one goroutine each.
		wg.Go(func() {
			if _, err := o.publish(ctx, p, "", "b", payload); err != nil {
				assert.ErrorIs(t, err, ErrBacklog)
				refused.Add(1)
			}
		})
	}
	waitFor(t, "a call refused by the backlog bound", func() bool { return refused.Load() > 0 })
	thaw()
	wg.Wait()
	waitFor(t, "every outcome", func() bool { a, q := o.answered(); return a == q })
	p.Close()
	var ok int64
	for _, err := range o.check(t) {
		if assert.NoError(t, err) {
			ok++
		}
	}
	assert.Equal(t, ok, publishCalls(t, s)-before, "Redis ran exactly the calls whose done said nil")
}

// TestPublishAsyncDialCtx: with no connection, PublishAsync waits for the
// dial bounded by its ctx; a ctx that ends first refuses the call (not
// sent), done never called.
func TestPublishAsyncDialCtx(t *testing.T) {
	s := redistest.StartStandalone(t, aclUser("&*"))
	p := New(withAddr(appUser, s), Timeouts{Write: 5 * time.Second, Reply: 5 * time.Second})
	t.Cleanup(p.Close)
	thaw := freeze(t, s) // the login hangs
	shortCtx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	var o outcomes
	_, err := o.publish(shortCtx, p, "", "d", []byte("x"))
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.ErrorIs(t, err, ErrNotSent)
	thaw()
	_, err = o.publish(testCtx(t), p, "", "d", []byte("y"))
	require.NoError(t, err)
	waitFor(t, "the outcome", func() bool { a, q := o.answered(); return a == q })
	p.Close()
	errs := o.check(t)
	require.Len(t, errs, 1)
	assert.NoError(t, errs[0])
	assert.False(t, errors.Is(errs[0], ErrNotSent))
}
