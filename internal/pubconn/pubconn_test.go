package pubconn

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/shardcast/shardcast/envelope"
	"github.com/shardcast/shardcast/internal/resp"
	"github.com/shardcast/shardcast/internal/subconn"
	"github.com/shardcast/shardcast/redistest"
)

// TestMain fails the package if a test leaves a goroutine behind: Close
// promises to stop the reader, and no caller may stay blocked.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// waitTimeout bounds every wait for a condition; generous because the
// 2-core test machines are shared and noisy.
const waitTimeout = 20 * time.Second

// aclUser is a redis-server argument list adding user "app" (password
// "pw") with the given channel patterns. The default user stays open so
// that the harness can still probe the server.
func aclUser(channels ...string) redistest.Option {
	args := []string{"--user", "app", "on", ">pw", "~*", "resetchannels"}
	args = append(args, channels...)
	return redistest.WithArgs(append(args, "+@all")...)
}

var appUser = subconn.Dialer{Username: "app", Password: "pw"}

func withAddr(d subconn.Dialer, s *redistest.Server) subconn.Dialer {
	d.Addr = s.Addr()
	return d
}

// newPub returns a Pub closed when the test ends, whose write and reply
// timeouts are both timeout.
func newPub(t testing.TB, d subconn.Dialer, timeout time.Duration) *Pub {
	return newPubWith(t, d, Timeouts{Write: timeout, Reply: timeout})
}

// newPubWith returns a Pub closed when the test ends.
func newPubWith(t testing.TB, d subconn.Dialer, timeouts Timeouts) *Pub {
	p := New(d, timeouts)
	t.Cleanup(p.Close)
	return p
}

// freeze stops s (SIGSTOP) and returns thaw, which resumes it; a cleanup
// resumes it if the test ends before thaw is called.
func freeze(t testing.TB, s *redistest.Server) (thaw func()) {
	t.Helper()
	require.NoError(t, s.Pause())
	var once sync.Once
	resume := func() error {
		var err error
		once.Do(func() { err = s.Resume() })
		return err
	}
	t.Cleanup(func() { _ = resume() })
	return func() {
		t.Helper()
		require.NoError(t, resume())
	}
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	t.Cleanup(cancel)
	return ctx
}

// received is one message seen by a subscriber, copied out of its buffer.
type received struct {
	channel string
	payload []byte
}

// collector subscribes with the real subscribe connection and records
// every message it is pushed.
type collector struct {
	mu   sync.Mutex
	msgs []received
}

func subscribe(t *testing.T, s *redistest.Server, channels ...string) *collector {
	t.Helper()
	col := &collector{}
	ctx := testCtx(t)
	conn, err := subconn.Open(ctx, subconn.Dialer{Addr: s.Addr()}, subconn.Classic, subconn.Hooks{
		OnMessage: func(channel string, payload []byte) {
			col.mu.Lock()
			col.msgs = append(col.msgs, received{strings.Clone(channel), bytes.Clone(payload)})
			col.mu.Unlock()
		},
	})
	require.NoError(t, err)
	t.Cleanup(conn.Close)
	for _, err := range conn.Subscribe(ctx, channels) {
		require.NoError(t, err)
	}
	return col
}

func (col *collector) len() int {
	col.mu.Lock()
	defer col.mu.Unlock()
	return len(col.msgs)
}

func (col *collector) all() []received {
	col.mu.Lock()
	defer col.mu.Unlock()
	return append([]received(nil), col.msgs...)
}

// waitFor polls cond until it holds, failing the test after waitTimeout.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: still waiting for %s", waitTimeout, what)
		}
		time.Sleep(time.Millisecond)
	}
}

// written reports how many calls on p's live wire were written and wait
// for replies. Calls that are queued but still in the buffer of a write in
// progress do not count: a wire closed before it writes them fails them as
// ErrNotSent, rightly.
func written(p *Pub) int {
	p.mu.Lock()
	w := p.w
	p.mu.Unlock()
	if w == nil {
		return 0
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.writing || len(w.buf) > 0 {
		return 0 // not settled: a write is under way or due
	}
	return int(w.sent - w.answered())
}

func dialing(p *Pub) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dialing != nil
}

// waitingForDial reports whether some goroutine is parked in the select
// of Pub.wire that waits for another caller's dial: how a test sees that a
// caller reached a wait it cannot signal. (Stack traces show the function
// holding the select as the top frame.)
func waitingForDial() bool {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		header, rest, _ := strings.Cut(g, "\n")
		top, _, _ := strings.Cut(rest, "\n")
		if strings.Contains(header, "[select") && strings.Contains(top, "pubconn.(*Pub).wire(") {
			return true
		}
	}
	return false
}

func publishCalls(t *testing.T, s *redistest.Server) int64 {
	t.Helper()
	stats, err := s.CommandStats(testCtx(t))
	require.NoError(t, err)
	return stats["publish"]
}

// publishAsync runs one raw Publish and delivers its result on a channel,
// so that a call that hangs fails the test (requireReturns) rather than
// hanging it.
func publishAsync(ctx context.Context, p *Pub, channel string, payload []byte) <-chan error {
	done := make(chan error, 1)
	go func() { done <- p.Publish(ctx, channel, payload, true, time.Time{}) }()
	return done
}

func requireReturns(t *testing.T, done <-chan error, what string) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(waitTimeout):
		t.Fatalf("%s: Publish still blocked after %v", what, waitTimeout)
		return nil
	}
}

func TestPublishRoundTrip(t *testing.T) {
	s := redistest.StartStandalone(t)
	col := subscribe(t, s, "rt:env", "rt:raw")
	p := newPub(t, subconn.Dialer{Addr: s.Addr()}, 5*time.Second)
	ctx := testCtx(t)

	big := make([]byte, 1<<20)
	_, _ = rand.Read(big)
	payloads := [][]byte{[]byte("hello"), {}, big, []byte("a\r\nb\x00c")}
	now := time.Now()
	for _, pl := range payloads {
		require.NoError(t, p.Publish(ctx, "rt:env", pl, false, now))
		require.NoError(t, p.Publish(ctx, "rt:raw", pl, true, now))
	}
	// The zero time is the envelope's "unknown" and must survive as such.
	require.NoError(t, p.Publish(ctx, "rt:env", []byte("no clock"), false, time.Time{}))

	want := 2*len(payloads) + 1
	waitFor(t, "every message", func() bool { return col.len() >= want })
	got := col.all()
	require.Len(t, got, want, "exactly the published messages")
	for i, pl := range payloads {
		env, raw := got[2*i], got[2*i+1]
		assert.Equal(t, "rt:env", env.channel)
		at, body, err := envelope.Decode(env.payload)
		require.NoError(t, err, "message %d", i)
		assert.True(t, bytes.Equal(pl, body), "enveloped payload %d", i)
		assert.True(t, at.Equal(now.Truncate(time.Microsecond)), "publish time %v, want %v", at, now)
		assert.Equal(t, "rt:raw", raw.channel)
		assert.True(t, bytes.Equal(pl, raw.payload), "raw payload %d: %d bytes, want %d", i, len(raw.payload), len(pl))
	}
	at, body, err := envelope.Decode(got[want-1].payload)
	require.NoError(t, err)
	assert.True(t, at.IsZero())
	assert.Equal(t, "no clock", string(body))
}

// TestConcurrentPublishers checks that batched writes from many callers
// keep every command intact and every reply matched: Redis counts exactly
// the PUBLISH calls made, and the subscriber sees each message once.
func TestConcurrentPublishers(t *testing.T) {
	const publishers, each = 64, 500
	s := redistest.StartStandalone(t)
	col := subscribe(t, s, "many")
	p := newPub(t, subconn.Dialer{Addr: s.Addr()}, 5*time.Second)
	ctx := testCtx(t)
	before := publishCalls(t, s)

	var wg sync.WaitGroup
	var failed atomic.Int64
	for g := range publishers {
		wg.Go(func() {
			for i := range each {
				// Sizes from 0 to ~1 KiB, so commands straddle writes; 16 MB
				// in all stays under the subscriber's 32 MB output limit.
				payload := []byte(fmt.Sprintf("%d/%d/%s", g, i, strings.Repeat("x", padding(g*each+i))))
				if err := p.Publish(ctx, "many", payload, g%2 == 0, time.Now()); err != nil {
					failed.Add(1)
					t.Errorf("publisher %d message %d: %v", g, i, err)
					return
				}
				if i%100 == 0 {
					// PING's +PONG travels the same ordered reply queue.
					if err := p.Ping(ctx); err != nil {
						t.Errorf("ping: %v", err)
					}
				}
			}
		})
	}
	wg.Wait()
	require.Zero(t, failed.Load())
	assert.Equal(t, int64(publishers*each), publishCalls(t, s)-before)

	waitFor(t, "every message", func() bool { return col.len() >= publishers*each })
	seen := make(map[string]bool, publishers*each)
	for _, m := range col.all() {
		body := m.payload
		if len(body) > 0 && body[0] == envelope.Magic {
			_, b, err := envelope.Decode(body)
			require.NoError(t, err)
			body = b
		}
		g, rest, _ := strings.Cut(string(body), "/")
		i, pad, _ := strings.Cut(rest, "/")
		gi, _ := strconv.Atoi(g)
		ii, _ := strconv.Atoi(i)
		require.Equal(t, strings.Repeat("x", padding(gi*each+ii)), pad, "message %s/%s corrupted", g, i)
		key := g + "/" + i
		require.False(t, seen[key], "message %s delivered twice", key)
		seen[key] = true
	}
	assert.Len(t, seen, publishers*each)
}

func padding(n int) int { return n * 7919 % 1001 }

func TestAuth(t *testing.T) {
	t.Run("acl user", func(t *testing.T) {
		s := redistest.StartStandalone(t, aclUser("&*"))
		p := newPub(t, withAddr(appUser, s), 5*time.Second)
		ctx := testCtx(t)
		// Concurrent first calls share one dial and login.
		var wg sync.WaitGroup
		for range 16 {
			wg.Go(func() { assert.NoError(t, p.Ping(ctx)) })
		}
		wg.Wait()
		require.NoError(t, p.Publish(ctx, "any", []byte("x"), false, time.Now()))
		clients, err := s.ClientList(ctx)
		require.NoError(t, err)
		var users []string
		for _, c := range clients {
			users = append(users, c["user"])
		}
		assert.Equal(t, []string{"app"}, users, "one publish connection, logged in as app")
	})
	t.Run("wrong password", func(t *testing.T) {
		s := redistest.StartStandalone(t, aclUser("&*"))
		d := withAddr(appUser, s)
		d.Password = "nope"
		p := newPub(t, d, 5*time.Second)
		err := p.Ping(testCtx(t))
		se, ok := resp.IsServerError(err)
		require.True(t, ok, "want a server error, got %v", err)
		assert.Contains(t, se.Msg, "WRONGPASS")
		// A refused login must not leave a wire behind.
		err = p.Publish(testCtx(t), "any", nil, true, time.Time{})
		_, ok = resp.IsServerError(err)
		assert.True(t, ok, "publish after a refused login: %v", err)
	})
	t.Run("requirepass", func(t *testing.T) {
		s := redistest.StartStandalone(t)
		// Set after start: the harness probes readiness without a password.
		_, err := s.Do(testCtx(t), "CONFIG", "SET", "requirepass", "secret")
		require.NoError(t, err)

		p := newPub(t, subconn.Dialer{Addr: s.Addr()}, 5*time.Second)
		err = p.Ping(testCtx(t))
		se, ok := resp.IsServerError(err)
		require.True(t, ok, "want a server error, got %v", err)
		assert.Contains(t, se.Msg, "NOAUTH")

		good := newPub(t, subconn.Dialer{Addr: s.Addr(), Password: "secret"}, 5*time.Second)
		require.NoError(t, good.Ping(testCtx(t)))
		require.NoError(t, good.Publish(testCtx(t), "any", []byte("x"), true, time.Time{}))
	})
}

// TestErrorReplyInPipeline interleaves refused and accepted publishes from
// concurrent callers: each caller must get the reply to its own command.
func TestErrorReplyInPipeline(t *testing.T) {
	const publishers, each = 16, 300
	s := redistest.StartStandalone(t, aclUser("&ok:*"))
	col := subscribe(t, s, "ok:a", "ok:b")
	p := newPub(t, withAddr(appUser, s), 5*time.Second)
	ctx := testCtx(t)
	before := publishCalls(t, s)

	var wg sync.WaitGroup
	var accepted atomic.Int64
	for g := range publishers {
		wg.Go(func() {
			for i := range each {
				allowed := (g+i)%3 != 0
				channel := "no:" + strconv.Itoa(i%2)
				if allowed {
					channel = "ok:" + string(rune('a'+i%2))
				}
				err := p.Publish(ctx, channel, []byte("x"), true, time.Time{})
				if allowed {
					if !assert.NoError(t, err, "publish to %s", channel) {
						return
					}
					accepted.Add(1)
					continue
				}
				se, ok := resp.IsServerError(err)
				if !assert.True(t, ok, "publish to %s: want a server error, got %v", channel, err) {
					return
				}
				assert.Contains(t, se.Msg, "NOPERM")
			}
		})
	}
	// Callers that give up at random moments leave their calls with the
	// wire; the pool must not hand those calls out while a reply is due.
	var abandoned atomic.Int64
	for g := range 4 {
		wg.Go(func() {
			for i := range each {
				allowed := i%2 == 0
				channel := "no:x"
				if allowed {
					channel = "ok:a"
				}
				ctx, cancel := context.WithTimeout(ctx, time.Duration((g*each+i)%50)*time.Microsecond)
				err := p.Publish(ctx, channel, []byte("x"), true, time.Time{})
				cancel()
				switch {
				case errors.Is(err, context.DeadlineExceeded):
					abandoned.Add(1)
				case allowed:
					if !assert.NoError(t, err, "publish to %s", channel) {
						return
					}
					accepted.Add(1)
				default:
					se, ok := resp.IsServerError(err)
					if !assert.True(t, ok, "publish to %s: want a server error, got %v", channel, err) {
						return
					}
					assert.Contains(t, se.Msg, "NOPERM")
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%d publishes abandoned by their ctx", abandoned.Load())
	// An abandoned publish may still have gone out: count only what the
	// callers saw succeed as a lower bound, and exactness without them.
	if abandoned.Load() > 0 {
		assert.GreaterOrEqual(t, publishCalls(t, s)-before, accepted.Load())
		return
	}
	assert.Equal(t, accepted.Load(), publishCalls(t, s)-before, "Redis counts only the permitted publishes")
	waitFor(t, "every permitted message", func() bool { return col.len() >= int(accepted.Load()) })
	assert.Equal(t, int(accepted.Load()), col.len())
}

// TestCloseWhileCallsWait: Close fails the calls waiting for replies (not
// as ErrNotSent: they were sent), returns, and every later call gets
// ErrClosed, as ErrNotSent.
func TestCloseWhileCallsWait(t *testing.T) {
	const waiting = 8
	s := redistest.StartStandalone(t)
	p := New(subconn.Dialer{Addr: s.Addr()}, Timeouts{Write: 5 * time.Second, Reply: 5 * time.Second})
	require.NoError(t, p.Ping(testCtx(t)))
	freeze(t, s)

	var dones []<-chan error
	for range waiting {
		dones = append(dones, publishAsync(context.Background(), p, "c", []byte("x")))
	}
	waitFor(t, "calls written", func() bool { return written(p) == waiting })
	p.Close()
	for i, done := range dones {
		err := requireReturns(t, done, "waiting call")
		assert.ErrorIs(t, err, ErrClosed, "call %d", i)
		assert.NotErrorIs(t, err, ErrNotSent, "call %d was written, so it may have run", i)
	}
	// Calls after Close never leave: ErrClosed and ErrNotSent.
	ctx := context.Background()
	for name, err := range map[string]error{
		"Publish":  p.Publish(ctx, "c", nil, true, time.Time{}),
		"SPublish": p.SPublish(ctx, "{t}.", "c", []byte("x"), true, time.Time{}),
		"Ping":     p.Ping(ctx),
	} {
		assert.ErrorIs(t, err, ErrClosed, name)
		assert.ErrorIs(t, err, ErrNotSent, name)
	}
	p.Close() // idempotent
}

// TestCloseDuringDial: a Publish stuck logging in to a frozen server, and
// one waiting for that dial, return ErrClosed once Close is called.
func TestCloseDuringDial(t *testing.T) {
	s := redistest.StartStandalone(t, aclUser("&*"))
	p := New(withAddr(appUser, s), Timeouts{Write: 5 * time.Second, Reply: 5 * time.Second})
	thaw := freeze(t, s)

	dialer := publishAsync(context.Background(), p, "d", []byte("x"))
	waitFor(t, "the dial", func() bool { return dialing(p) })
	waiter := publishAsync(context.Background(), p, "d", []byte("y"))
	waitFor(t, "a caller waiting for the dial", waitingForDial)
	p.Close()
	for name, done := range map[string]<-chan error{"dialer": dialer, "waiter": waiter} {
		select {
		case err := <-done:
			assert.ErrorIs(t, err, ErrClosed, name)
			assert.ErrorIs(t, err, ErrNotSent, name)
		case <-time.After(waitTimeout):
			// Release the stuck caller so that the test can end.
			thaw()
			<-done
			t.Fatalf("%s: Publish still blocked %v after Close", name, waitTimeout)
		}
	}
}

// TestDialSharedCtx: callers that wait for another caller's dial are not
// failed by that caller's ctx.
func TestDialSharedCtx(t *testing.T) {
	s := redistest.StartStandalone(t, aclUser("&*"))
	p := newPub(t, withAddr(appUser, s), 5*time.Second)
	thaw := freeze(t, s)

	shortCtx, cancel := context.WithCancel(context.Background())
	defer cancel()
	short := publishAsync(shortCtx, p, "d", []byte("short"))
	waitFor(t, "the dial", func() bool { return dialing(p) })
	long := publishAsync(testCtx(t), p, "d", []byte("long"))
	waitFor(t, "a caller waiting for the dial", waitingForDial)
	cancel()
	assert.ErrorIs(t, requireReturns(t, short, "cancelled dialer"), context.Canceled)
	thaw()
	assert.NoError(t, requireReturns(t, long, "waiter"), "the waiter dials again under its own ctx")
}

// TestZeroWriteTimeout: zero means no write deadline, not an expired one.
func TestZeroWriteTimeout(t *testing.T) {
	s := redistest.StartStandalone(t)
	p := newPub(t, subconn.Dialer{Addr: s.Addr()}, 0)
	ctx := testCtx(t)
	require.NoError(t, p.Ping(ctx))
	require.NoError(t, p.Publish(ctx, "z", []byte("x"), false, time.Now()))
}

// TestPublishAfterCtxEnd: a ctx that ended before the call either fails
// it at once or lets it through; it never poisons the wire for others.
func TestPublishAfterCtxEnd(t *testing.T) {
	s := redistest.StartStandalone(t)
	p := newPub(t, subconn.Dialer{Addr: s.Addr()}, 5*time.Second)
	ctx := testCtx(t)
	require.NoError(t, p.Ping(ctx))
	dead, cancel := context.WithCancel(context.Background())
	cancel()
	for range 100 {
		err := p.Publish(dead, "e", []byte("x"), true, time.Time{})
		if err != nil {
			require.ErrorIs(t, err, context.Canceled)
		}
	}
	require.NoError(t, p.Publish(ctx, "e", []byte("x"), true, time.Time{}))
}

// TestLoginCtxEndsAfterReply: a ctx that ends just as the AUTH reply
// arrives must not leave an expired deadline on the new wire. The race
// window is narrow, so the test runs many logins with cancels spread
// across their duration.
func TestLoginCtxEndsAfterReply(t *testing.T) {
	s := redistest.StartStandalone(t, aclUser("&*"))
	p := newPub(t, withAddr(appUser, s), 5*time.Second)
	ping := []byte("*1\r\n$4\r\nPING\r\n")
	reply := make([]byte, 7)
	var opened, poisoned int
	for i := range 3000 {
		ctx, cancel := context.WithCancel(context.Background())
		fired := make(chan struct{})
		go func() {
			defer close(fired)
			// Spread the cancel over the ~0–100µs a local login takes.
			for end := time.Now().Add(time.Duration(i%100) * time.Microsecond); time.Now().Before(end); {
			}
			cancel()
		}()
		w, err := p.open(ctx)
		<-fired
		if err != nil {
			require.ErrorIs(t, err, context.Canceled, "a login fails only by its ctx")
			continue
		}
		opened++
		_, err = w.nc.Write(ping)
		if err == nil {
			_, err = io.ReadFull(w.nc, reply)
		}
		_ = w.nc.Close()
		if err != nil {
			poisoned++
			t.Logf("login %d: wire unusable after a successful login: %v", i, err)
		}
	}
	t.Logf("%d of 3000 logins succeeded before their cancel", opened)
	assert.Zero(t, poisoned)
}
