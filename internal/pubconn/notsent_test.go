package pubconn

import (
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardcast/shardcast/envelope"
	"github.com/shardcast/shardcast/internal/resp"
	"github.com/shardcast/shardcast/internal/subconn"
	"github.com/shardcast/shardcast/redistest"
)

// countingProxy is a loopback listener that counts the connections it
// accepts, so that a test sees every dial a Pub makes. While down it
// closes each connection at once, so a dial that logs in fails; while up
// it relays the connection to target.
type countingProxy struct {
	ln       net.Listener
	target   string
	accepted atomic.Int64
	up       atomic.Bool

	mu     sync.Mutex
	conns  []net.Conn
	closed bool
	wg     sync.WaitGroup
}

func startProxy(t *testing.T, target string) *countingProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	px := &countingProxy{ln: ln, target: target}
	px.wg.Go(px.serve)
	t.Cleanup(px.close)
	return px
}

func (px *countingProxy) addr() string { return px.ln.Addr().String() }

func (px *countingProxy) serve() {
	for {
		nc, err := px.ln.Accept()
		if err != nil {
			return
		}
		// Counted before the close below: a caller whose dial reached
		// this listener cannot see its login fail before the count.
		px.accepted.Add(1)
		if !px.up.Load() {
			_ = nc.Close()
			continue
		}
		up, err := net.Dial("tcp", px.target)
		if err != nil {
			_ = nc.Close()
			continue
		}
		if !px.track(nc, up) {
			return
		}
		px.wg.Go(func() { relay(up, nc) })
		px.wg.Go(func() { relay(nc, up) })
	}
}

// track remembers both ends for close; it reports false (and closes them)
// once the proxy is closing.
func (px *countingProxy) track(a, b net.Conn) bool {
	px.mu.Lock()
	defer px.mu.Unlock()
	if px.closed {
		_ = a.Close()
		_ = b.Close()
		return false
	}
	px.conns = append(px.conns, a, b)
	return true
}

// relay copies src to dst, then closes both, so that the other direction
// ends too.
func relay(dst, src net.Conn) {
	_, _ = io.Copy(dst, src)
	_ = dst.Close()
	_ = src.Close()
}

func (px *countingProxy) close() {
	_ = px.ln.Close()
	px.mu.Lock()
	px.closed = true
	conns := px.conns
	px.conns = nil
	px.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
	px.wg.Wait()
}

// freeAddr returns a loopback address nothing listens on: a listener's
// port, closed again.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// TestDialFailureIsNotSent: a failed dial fails the call with an error that
// is ErrNotSent and still carries the dial's own error (the refused
// connection, as a net.OpError naming the dial), for every kind of call.
func TestDialFailureIsNotSent(t *testing.T) {
	addr := freeAddr(t)
	p := newPub(t, subconn.Dialer{Addr: addr}, 5*time.Second)
	ctx := testCtx(t)
	calls := map[string]func() error{
		"Publish":  func() error { return p.Publish(ctx, "c", []byte("x"), true, time.Time{}) },
		"SPublish": func() error { return p.SPublish(ctx, "{t}.", "c", []byte("x"), true, time.Time{}) },
		"Ping":     func() error { return p.Ping(ctx) },
	}
	for name, call := range calls {
		err := call()
		require.Error(t, err, name)
		assert.ErrorIs(t, err, ErrNotSent, name)
		assert.ErrorIs(t, err, syscall.ECONNREFUSED, name)
		var op *net.OpError
		if assert.ErrorAs(t, err, &op, name) {
			assert.Equal(t, "dial", op.Op, name)
		}
		assert.Contains(t, err.Error(), addr, "%s: the error names the address", name)
		assert.NotContains(t, err.Error(), ErrNotSent.Error(), "%s: the marker does not change the message", name)
	}
}

// TestRedialDelay: after a failed dial, calls fail at once with the same
// ErrNotSent error for the whole redial delay without dialling again, even
// once the server is reachable.
func TestRedialDelay(t *testing.T) {
	s := redistest.StartStandalone(t, aclUser("&*"))
	px := startProxy(t, s.Addr())
	d := appUser
	d.Addr = px.addr()
	p := New(d, Timeouts{Write: 5 * time.Second, Reply: 5 * time.Second, Redial: time.Hour})
	t.Cleanup(p.Close)
	ctx := testCtx(t)

	first := p.Publish(ctx, "r", []byte("x"), true, time.Time{})
	require.ErrorIs(t, first, ErrNotSent)
	require.Equal(t, int64(1), px.accepted.Load(), "the first call dialled once")

	px.up.Store(true) // reachable now, but the delay still holds
	const callers, each = 8, 25
	var wg sync.WaitGroup
	for g := range callers {
		wg.Go(func() {
			for i := range each {
				var err error
				switch (g + i) % 3 {
				case 0:
					err = p.Publish(ctx, "r", []byte("x"), true, time.Time{})
				case 1:
					err = p.SPublish(ctx, "{t}.", "r", []byte("x"), false, time.Now())
				default:
					err = p.Ping(ctx)
				}
				if !assert.ErrorIs(t, err, ErrNotSent) || !assert.Equal(t, first.Error(), err.Error(), "the failed dial's error") {
					return
				}
			}
		})
	}
	wg.Wait()
	assert.Equal(t, int64(1), px.accepted.Load(), "no dial during the redial delay")
	stats, err := s.CommandStats(ctx)
	require.NoError(t, err)
	assert.Zero(t, stats["publish"]+stats["spublish"], "nothing reached the server")
}

// TestRedialAfterDelay: once the redial delay has passed, the next call
// dials again and, with the server back, publishes.
func TestRedialAfterDelay(t *testing.T) {
	s := redistest.StartStandalone(t, aclUser("&*"))
	col := subscribe(t, s, "back")
	px := startProxy(t, s.Addr())
	d := appUser
	d.Addr = px.addr()
	p := New(d, Timeouts{Write: 5 * time.Second, Reply: 5 * time.Second, Redial: 20 * time.Millisecond})
	t.Cleanup(p.Close)
	ctx := testCtx(t)

	require.ErrorIs(t, p.Publish(ctx, "back", []byte("lost"), true, time.Time{}), ErrNotSent)
	require.Equal(t, int64(1), px.accepted.Load())
	px.up.Store(true)
	var last error
	waitFor(t, "a publish after the redial delay", func() bool {
		last = p.Publish(ctx, "back", []byte("after"), true, time.Time{})
		if last != nil {
			require.ErrorIs(t, last, ErrNotSent, "a call in the delay never left")
		}
		return last == nil
	})
	assert.GreaterOrEqual(t, px.accepted.Load(), int64(2), "the Pub dialled again")
	waitFor(t, "the message", func() bool { return col.len() == 1 })
	assert.Equal(t, "after", string(col.all()[0].payload))
}

// TestBacklogIsNotSent: a call refused because the backlog is full is
// ErrNotSent, and indeed never reaches Redis: once the server reads
// again, it counts exactly the calls that succeeded.
func TestBacklogIsNotSent(t *testing.T) {
	// 48 MiB offered: more than the socket buffers and MaxBacklog hold.
	const publishers = 48
	s := redistest.StartStandalone(t)
	// No write deadline within the test: the blocked write must last
	// until Resume, so that only the backlog bound refuses calls.
	p := newPub(t, subconn.Dialer{Addr: s.Addr()}, 10*time.Minute)
	ctx := testCtx(t)
	require.NoError(t, p.Ping(ctx))
	before := publishCalls(t, s)
	thaw := freeze(t, s)

	payload := make([]byte, 1<<20)
	errs := make([]error, publishers)
	var refused atomic.Int64
	var wg sync.WaitGroup
	for g := range publishers {
		wg.Go(func() {
			errs[g] = p.Publish(ctx, "b", payload, true, time.Time{})
			if errs[g] != nil {
				refused.Add(1)
			}
		})
	}
	waitFor(t, "a call refused by the backlog bound", func() bool { return refused.Load() > 0 })
	thaw()
	wg.Wait()

	var ok int64
	for g, err := range errs {
		if err == nil {
			ok++
			continue
		}
		assert.ErrorIs(t, err, ErrBacklog, "publisher %d", g)
		assert.ErrorIs(t, err, ErrNotSent, "publisher %d", g)
	}
	require.Positive(t, refused.Load())
	assert.Equal(t, ok, publishCalls(t, s)-before, "Redis ran exactly the calls that succeeded")
}

// TestQueuedFailuresAreSent: once a command is queued on a wire, no
// failure is ErrNotSent, whether Redis may have run it (its ctx ended) or
// refused it. A server killed, or Close, while calls wait are checked in
// TestServerKilled and TestCloseWhileCallsWait.
func TestQueuedFailuresAreSent(t *testing.T) {
	t.Run("ctx ended while waiting", func(t *testing.T) {
		s := redistest.StartStandalone(t)
		p := newPub(t, subconn.Dialer{Addr: s.Addr()}, 5*time.Second)
		require.NoError(t, p.Ping(testCtx(t)))
		thaw := freeze(t, s)
		ctx, cancel := context.WithCancel(context.Background())
		done := publishAsync(ctx, p, "c", []byte("x"))
		waitFor(t, "call written", func() bool { return written(p) == 1 })
		cancel()
		err := requireReturns(t, done, "abandoned call")
		assert.ErrorIs(t, err, context.Canceled)
		assert.NotErrorIs(t, err, ErrNotSent, "the command stays in the pipeline")
		thaw()
	})
	t.Run("refused by the server", func(t *testing.T) {
		s := redistest.StartStandalone(t, aclUser("&ok"))
		p := newPub(t, withAddr(appUser, s), 5*time.Second)
		err := p.Publish(testCtx(t), "no", []byte("x"), true, time.Time{})
		se, ok := resp.IsServerError(err)
		require.True(t, ok, "want a server error, got %v", err)
		assert.Contains(t, se.Msg, "NOPERM")
		assert.NotErrorIs(t, err, ErrNotSent)
	})
}

// TestSPublish: SPublish sends SPUBLISH with the key keyPrefix+channel to
// the node it is connected to, enveloped unless raw. A node that does not
// own the key's slot answers MOVED: a server error, not ErrNotSent (the
// caller resends it elsewhere), and the wire stays in step.
func TestSPublish(t *testing.T) {
	c := redistest.StartCluster(t, 2, 0)
	ctx := testCtx(t)
	masters, err := c.Masters(ctx)
	require.NoError(t, err)
	require.Len(t, masters, 2)
	owner, other := masters[0], masters[1]
	mine, theirs := tagOwnedBy(t, c, owner), tagOwnedBy(t, c, other)

	col := &collector{}
	sub, err := subconn.Open(ctx, subconn.Dialer{Addr: owner.Addr()}, subconn.Sharded, subconn.Hooks{
		OnMessage: func(channel string, payload []byte) {
			col.mu.Lock()
			col.msgs = append(col.msgs, received{strings.Clone(channel), append([]byte(nil), payload...)})
			col.mu.Unlock()
		},
	})
	require.NoError(t, err)
	t.Cleanup(sub.Close)
	for _, err := range sub.Subscribe(ctx, []string{mine + "ch"}) {
		require.NoError(t, err)
	}

	before, err := owner.CommandStats(ctx)
	require.NoError(t, err)
	p := newPub(t, subconn.Dialer{Addr: owner.Addr()}, 5*time.Second)
	now := time.Now()
	require.NoError(t, p.SPublish(ctx, mine, "ch", []byte("enveloped"), false, now))
	require.NoError(t, p.SPublish(ctx, mine, "ch", []byte("raw"), true, now))

	err = p.SPublish(ctx, theirs, "ch", []byte("elsewhere"), true, now)
	se, ok := resp.IsServerError(err)
	require.True(t, ok, "want MOVED, got %v", err)
	assert.True(t, se.IsMoved(), "want MOVED, got %q", se.Msg)
	assert.Contains(t, se.Msg, other.Addr(), "MOVED names the owner")
	assert.NotErrorIs(t, err, ErrNotSent)
	require.NoError(t, p.SPublish(ctx, mine, "ch", []byte("after"), true, now), "the wire stays in step")

	waitFor(t, "the messages", func() bool { return col.len() >= 3 })
	got := col.all()
	require.Len(t, got, 3)
	for _, m := range got {
		assert.Equal(t, mine+"ch", m.channel, "the key is keyPrefix+channel")
	}
	at, body, err := envelope.Decode(got[0].payload)
	require.NoError(t, err)
	assert.Equal(t, "enveloped", string(body))
	assert.True(t, at.Equal(now.Truncate(time.Microsecond)))
	assert.Equal(t, "raw", string(got[1].payload))
	assert.Equal(t, "after", string(got[2].payload))

	after, err := owner.CommandStats(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(3), after["spublish"]-before["spublish"], "three SPUBLISH ran on the owner")
	assert.Equal(t, before["publish"], after["publish"], "no classic PUBLISH")
}

// tagOwnedBy returns a "{tag}." key prefix whose slot master owns.
func tagOwnedBy(t *testing.T, c *redistest.Cluster, master *redistest.Server) string {
	t.Helper()
	ctx := testCtx(t)
	keys := make([]string, 64)
	for i := range keys {
		keys[i] = "{t" + strconv.Itoa(i) + "}."
	}
	slots, err := master.KeySlots(ctx, keys...)
	require.NoError(t, err)
	for i, slot := range slots {
		m, err := c.MasterOfSlot(ctx, slot)
		require.NoError(t, err)
		if m == master {
			return keys[i]
		}
	}
	t.Fatalf("no tag of %d maps to a slot of %s", len(keys), master.Addr())
	return ""
}

// TestNotSentUnwrap: the marker lets errors.Is see both ErrNotSent and the
// cause, errors.As reach a typed cause, and keeps the cause's message.
func TestNotSentUnwrap(t *testing.T) {
	cause := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	err := error(&notSent{cause})
	assert.ErrorIs(t, err, ErrNotSent)
	assert.ErrorIs(t, err, syscall.ECONNREFUSED)
	var op *net.OpError
	require.ErrorAs(t, err, &op)
	assert.Same(t, cause, op)
	assert.Equal(t, cause.Error(), err.Error())
	assert.False(t, errors.Is(cause, ErrNotSent))
}

// failingConn accepts no byte: every Write fails before sending anything,
// and Read blocks until Close.
type failingConn struct {
	net.Conn // nil: only the methods below are used
	closed   chan struct{}
	once     sync.Once
}

func (c *failingConn) Write([]byte) (int, error) { return 0, errors.New("write refused") }
func (c *failingConn) Read([]byte) (int, error)  { <-c.closed; return 0, net.ErrClosed }
func (c *failingConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return nil
}
func (c *failingConn) SetWriteDeadline(time.Time) error { return nil }

// TestUnwrittenCommandsAreNotSent: commands queued on a wire whose write
// fails before a byte went out never reached Redis, so they fail with
// ErrNotSent (the cluster engine may resend them), not as "maybe sent".
func TestUnwrittenCommandsAreNotSent(t *testing.T) {
	p := New(subconn.Dialer{Addr: "127.0.0.1:1"}, Timeouts{Write: time.Second, Reply: time.Second})
	defer p.Close()
	w := &wire{nc: &failingConn{closed: make(chan struct{})}}
	p.mu.Lock()
	p.w = w
	p.wires.Add(1)
	p.mu.Unlock()
	go p.read(w)
	err := p.Publish(testCtx(t), "c", []byte("x"), true, time.Time{})
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrNotSent, "no byte of the command was written: %v", err)
}
