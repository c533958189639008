package subconn

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/shardcast/shardcast/internal/resp"
	"github.com/shardcast/shardcast/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeRedis is a loopback listener standing in for Redis where a test
// needs what real Redis never does (replies that fit no command, a server
// that stops reading): the test reads each command and writes the bytes it
// chooses.
type fakeRedis struct {
	ln    net.Listener
	peers chan net.Conn
	done  chan struct{}
}

func startFake(t *testing.T) *fakeRedis {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	f := &fakeRedis{ln: ln, peers: make(chan net.Conn, 8), done: make(chan struct{})}
	go func() {
		defer close(f.done)
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			select {
			case f.peers <- nc:
			default:
				_ = nc.Close()
			}
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-f.done
		for {
			select {
			case nc := <-f.peers:
				_ = nc.Close()
			default:
				return
			}
		}
	})
	return f
}

func (f *fakeRedis) addr() string { return f.ln.Addr().String() }

// fakePeer is the server side of one accepted connection.
type fakePeer struct {
	t  *testing.T
	nc net.Conn
	r  *bufio.Reader
}

// next returns the next connection the fake accepted; it is closed when
// the test ends.
func (f *fakeRedis) next(t *testing.T) *fakePeer {
	t.Helper()
	select {
	case nc := <-f.peers:
		t.Cleanup(func() { _ = nc.Close() })
		// Bounds every read and write of the test's side.
		require.NoError(t, nc.SetDeadline(time.Now().Add(30*time.Second)))
		return &fakePeer{t: t, nc: nc, r: bufio.NewReader(nc)}
	case <-time.After(10 * time.Second):
		t.Fatal("no connection reached the fake server")
		return nil
	}
}

// expect reads the next command and checks it is args.
func (p *fakePeer) expect(args ...string) {
	p.t.Helper()
	cmd, err := redistest.ReadCommand(p.r)
	require.NoError(p.t, err)
	require.Equal(p.t, args, cmd)
}

func (p *fakePeer) send(raw string) {
	p.t.Helper()
	_, err := p.nc.Write([]byte(raw))
	require.NoError(p.t, err)
}

// serve answers every command with reply(cmd) on a goroutine of its own
// until the connection closes; the test's end closes it and waits.
func (p *fakePeer) serve(reply func(cmd []string) string) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			cmd, err := redistest.ReadCommand(p.r)
			if err != nil {
				return
			}
			if _, err := p.nc.Write([]byte(reply(cmd))); err != nil {
				return
			}
		}
	}()
	p.t.Cleanup(func() { _ = p.nc.Close(); <-done })
}

// openFake opens a Conn on f, answering its handshake PING.
func openFake(t *testing.T, f *fakeRedis, mode Mode, hooks Hooks) (*Conn, *fakePeer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	type opened struct {
		c   *Conn
		err error
	}
	res := make(chan opened, 1)
	go func() { c, err := Open(ctx, Dialer{Addr: f.addr()}, mode, hooks); res <- opened{c, err} }()
	p := f.next(t)
	p.expect("PING")
	p.send("+PONG\r\n")
	r := <-res
	require.NoError(t, r.err)
	t.Cleanup(r.c.Close)
	return r.c, p
}

// waitDone waits for the wire to be gone.
func waitDone(t *testing.T, c *Conn) {
	t.Helper()
	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done did not close")
	}
}

// TestUnmatchedReplyClosesTheWire: a reply the connection cannot fit to
// its commands leaves the stream's meaning unknown, so the wire closes:
// Done closes, Err wraps resp.ErrProtocol, and the calls waiting for replies
// fail with it instead of hanging.
func TestUnmatchedReplyClosesTheWire(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	t.Run("confirmation with nothing pending", func(t *testing.T) {
		conn, p := openFake(t, startFake(t), Classic, Hooks{})
		p.send(confirmation("subscribe", "x", 1))
		waitDone(t, conn)
		assert.ErrorIs(t, conn.Err(), resp.ErrProtocol)
		assert.ErrorIs(t, conn.Subscribe(ctx, []string{"y"})[0], resp.ErrProtocol, "a dead wire reports why")
		assert.ErrorIs(t, conn.Ping(ctx), resp.ErrProtocol)
	})
	for name, reply := range map[string]string{
		"garbage":                     "?x\r\n",
		"confirmation of another one": confirmation("subscribe", "b", 1),
		"status reply":                "+OK\r\n",
	} {
		t.Run(name, func(t *testing.T) {
			conn, p := openFake(t, startFake(t), Classic, Hooks{})
			res := make(chan []error, 1)
			go func() { res <- conn.Subscribe(ctx, []string{"a"}, []string{"c"}) }()
			p.expect("SUBSCRIBE", "a")
			p.expect("SUBSCRIBE", "c")
			p.send(reply)
			var errs []error
			select {
			case errs = <-res:
			case <-time.After(10 * time.Second):
				t.Fatal("the pending Subscribe hangs")
			}
			require.Len(t, errs, 2)
			for _, err := range errs {
				assert.ErrorIs(t, err, resp.ErrProtocol)
			}
			waitDone(t, conn)
			assert.ErrorIs(t, conn.Err(), resp.ErrProtocol)
		})
	}
}

// TestPushedUnsubscribeAmongReplies: the server's own sunsubscribe notices
// (a slot moved) can arrive before the replies to any command; they go to
// OnLost and must not consume, or break, the replies of the calls waiting.
func TestPushedUnsubscribeAmongReplies(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rec := newRecorder()
	conn, p := openFake(t, startFake(t), Sharded, rec.hooks())
	async := func(f func() []error) <-chan []error {
		res := make(chan []error, 1)
		go func() { res <- f() }()
		return res
	}
	result := func(res <-chan []error) []error {
		t.Helper()
		select {
		case errs := <-res:
			return errs
		case <-time.After(10 * time.Second):
			t.Fatal("the call hangs")
			return nil
		}
	}

	res := async(func() []error { return conn.Subscribe(ctx, []string{"{s}.a", "{s}.b", "{s}.c"}) })
	p.expect("SSUBSCRIBE", "{s}.a", "{s}.b", "{s}.c")
	p.send(confirmation("ssubscribe", "{s}.a", 1) + confirmation("ssubscribe", "{s}.b", 2) + confirmation("ssubscribe", "{s}.c", 3))
	require.Equal(t, []error{nil}, result(res))

	// A notice while a subscribe waits.
	res = async(func() []error { return conn.Subscribe(ctx, []string{"{t}.a"}) })
	p.expect("SSUBSCRIBE", "{t}.a")
	p.send(confirmation("sunsubscribe", "{s}.c", 2) + confirmation("ssubscribe", "{t}.a", 3))
	require.Equal(t, []error{nil}, result(res))
	assert.Equal(t, []string{"{s}.c"}, rec.lostChannels())

	// Notices while our own unsubscribe of other channels waits, before
	// and between its confirmations.
	res = async(func() []error { return conn.Unsubscribe(ctx, []string{"{s}.a", "{s}.b"}) })
	p.expect("SUNSUBSCRIBE", "{s}.a", "{s}.b")
	p.expect("PING") // sent behind every unsubscribe; its pong ends the call
	p.send(confirmation("sunsubscribe", "{t}.a", 2) + confirmation("sunsubscribe", "{s}.a", 1) + confirmation("sunsubscribe", "{s}.b", 0) + "+PONG\r\n")
	require.Equal(t, []error{nil}, result(res))
	assert.Equal(t, []string{"{s}.c", "{t}.a"}, rec.lostChannels(), "our own confirmations are not losses")

	// A notice while a ping waits.
	pinged := make(chan error, 1)
	go func() { pinged <- conn.Ping(ctx) }()
	p.expect("PING")
	p.send(confirmation("sunsubscribe", "{x}.gone", 0) + "+PONG\r\n")
	select {
	case err := <-pinged:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the ping hangs")
	}
	assert.Equal(t, []string{"{s}.c", "{t}.a", "{x}.gone"}, rec.lostChannels())
	assert.True(t, conn.Alive())
	assert.NoError(t, conn.Err())
}

// TestSlotMovedUnderOwnUnsubscribe: the slot of a channel moves away just
// before Redis runs our SUNSUBSCRIBE of it. The server's notice comes
// first (it reads like our confirmation), then Redis refuses our command
// with MOVED. Both belong to the one Unsubscribe call, which the PING sent
// behind it ends: the call reports MOVED, the wire stays in step.
func TestSlotMovedUnderOwnUnsubscribe(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rec := newRecorder()
	conn, p := openFake(t, startFake(t), Sharded, rec.hooks())

	res := make(chan []error, 1)
	go func() { res <- conn.Subscribe(ctx, []string{"{s}.a"}) }()
	p.expect("SSUBSCRIBE", "{s}.a")
	p.send(confirmation("ssubscribe", "{s}.a", 1))
	require.Equal(t, []error{nil}, <-res)

	go func() { res <- conn.Unsubscribe(ctx, []string{"{s}.a"}) }()
	p.expect("SUNSUBSCRIBE", "{s}.a")
	p.expect("PING")
	p.send(confirmation("sunsubscribe", "{s}.a", 0) + "-MOVED 1234 127.0.0.1:7001\r\n" + "+PONG\r\n")
	var errs []error
	select {
	case errs = <-res:
	case <-time.After(10 * time.Second):
		t.Fatal("the unsubscribe hangs")
	}
	require.Len(t, errs, 1)
	se, ok := resp.IsServerError(errs[0])
	require.True(t, ok, "want the MOVED reply, got %v", errs[0])
	assert.True(t, se.IsMoved())

	pinged := make(chan error, 1)
	go func() { pinged <- conn.Ping(ctx) }()
	p.expect("PING")
	p.send("+PONG\r\n")
	select {
	case err := <-pinged:
		require.NoError(t, err, "the MOVED reply was not left for the next call")
	case <-time.After(10 * time.Second):
		t.Fatal("the ping hangs")
	}
	assert.True(t, conn.Alive())
	assert.NoError(t, conn.Err())
	assert.Empty(t, rec.lostChannels(), "a channel we were dropping anyway is no loss")
}

// TestCloseDuringBlockedWrite: Close must not wait for a write the server
// will never take (it stopped reading); the blocked command fails.
func TestCloseDuringBlockedWrite(t *testing.T) {
	conn, _ := openFake(t, startFake(t), Classic, Hooks{})
	huge := strings.Repeat("c", 64<<20) // far beyond what the socket buffers hold
	res := make(chan []error, 1)
	go func() { res <- conn.Subscribe(context.Background(), []string{huge}) }()
	// The writer holds the write lock until its write returns.
	require.Eventually(t, func() bool { return len(conn.wlock) == 1 }, 10*time.Second, time.Millisecond, "the write did not start")

	closed := make(chan struct{})
	go func() { conn.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close hangs behind the blocked write")
	}
	select {
	case errs := <-res:
		require.Len(t, errs, 1)
		assert.Error(t, errs[0])
	case <-time.After(10 * time.Second):
		t.Fatal("the blocked Subscribe did not return after Close")
	}
	assert.ErrorIs(t, conn.Err(), ErrClosed)
	assert.Error(t, conn.Ping(context.Background()))
}

// TestContextEndsBlockedWrite: ctx ending while the write is stuck
// interrupts it; the stream is then cut mid-command, so the wire closes.
func TestContextEndsBlockedWrite(t *testing.T) {
	conn, p := openFake(t, startFake(t), Classic, Hooks{})
	huge := strings.Repeat("c", 64<<20) // far beyond what the socket buffers hold
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	res := make(chan []error, 1)
	go func() { res <- conn.Subscribe(ctx, []string{huge}) }()
	_, err := p.r.Peek(1) // the write has begun, and the server reads no more
	require.NoError(t, err)
	cancel()
	select {
	case errs := <-res:
		require.Len(t, errs, 1)
		require.ErrorIs(t, errs[0], context.Canceled)
	case <-time.After(10 * time.Second):
		t.Fatal("the blocked Subscribe ignores its ctx")
	}
	waitDone(t, conn)
	assert.Error(t, conn.Err())
}

// deadlineConn wraps a net.Conn, runs afterWrite once after the next
// successful Write, and counts the write deadlines set in the past.
type deadlineConn struct {
	net.Conn
	mu         sync.Mutex
	afterWrite func()
	pastSets   int
}

func (d *deadlineConn) Write(b []byte) (int, error) {
	n, err := d.Conn.Write(b)
	d.mu.Lock()
	f := d.afterWrite
	d.afterWrite = nil
	d.mu.Unlock()
	if f != nil && err == nil {
		f()
	}
	return n, err
}

func (d *deadlineConn) SetWriteDeadline(t time.Time) error {
	if !t.IsZero() {
		d.mu.Lock()
		d.pastSets++
		d.mu.Unlock()
	}
	return d.Conn.SetWriteDeadline(t)
}

func (d *deadlineConn) setAfterWrite(f func()) { d.mu.Lock(); d.afterWrite = f; d.mu.Unlock() }

func (d *deadlineConn) deadlinesSet() int { d.mu.Lock(); defer d.mu.Unlock(); return d.pastSets }

// TestContextEndingRightAfterWriteSparesTheNextWrite: when ctx ends just
// as a write completes, the deadline its AfterFunc sets (on a goroutine of
// its own) must be cleared after it is set, not before, or the next,
// unrelated command fails with a timeout and takes the wire down.
func TestContextEndingRightAfterWriteSparesTheNextWrite(t *testing.T) {
	f := startFake(t)
	raw, err := net.Dial("tcp", f.addr())
	require.NoError(t, err)
	dc := &deadlineConn{Conn: raw}
	conn := newConn(dc, Classic, Hooks{})
	t.Cleanup(conn.Close)
	f.next(t).serve(func([]string) string { return "+PONG\r\n" })

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := range 100 {
		pingCtx, pingCancel := context.WithCancel(ctx)
		dc.setAfterWrite(pingCancel)
		_ = conn.Ping(pingCtx) // nil or Canceled, whichever select picks
		require.Eventually(t, func() bool { return dc.deadlinesSet() == i+1 }, 10*time.Second, time.Millisecond,
			"the AfterFunc of the ended ctx ran")
		require.NoError(t, conn.Ping(ctx), "round %d: the next write failed", i)
	}
	assert.True(t, conn.Alive())
}

// TestRefusedConnectionSaysWhy: a server at maxclients answers a new
// connection with an error and closes it, before any command arrives.
// Whether that reply comes before or after Open's PING was queued, Open
// fails with the server's error. Each round races the reader against the
// PING.
func TestRefusedConnectionSaysWhy(t *testing.T) {
	s := redistest.StartStandalone(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	admin, err := s.Dial(ctx)
	require.NoError(t, err)
	defer admin.Close()
	require.NoError(t, admin.SetMaxClients(ctx, 1))
	// Sometimes the reply never reaches the client: the server closes a
	// socket holding the unread PING, which resets the connection, and the
	// kernel drops a reply the reader had not read yet. That is about 1
	// round in 2,000 on an idle machine, but up to 4 in 100 were seen with
	// CI's packages running side by side, the reader being slower. Nothing
	// on the client can tell why then; such a round must fail as a reset
	// connection, and most rounds must name the refusal.
	const rounds = 100
	told := 0
	for range rounds {
		c, err := Open(ctx, Dialer{Addr: s.Addr()}, Classic, Hooks{})
		require.Nil(t, c)
		require.Error(t, err)
		if _, isReply := resp.IsServerError(err); isReply {
			require.ErrorContains(t, err, "max number of clients reached")
			told++
			continue
		}
		require.True(t, errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET),
			"a refusal that lost its reply fails as a reset connection, not %v", err)
	}
	require.GreaterOrEqual(t, told, rounds*9/10, "the server's refusal is the error")
}

// TestPingBehindBlockedWrite: a Ping waiting for the write lock, held by a
// write the server will not take, gives up when its ctx ends, so that a
// health check can drop a frozen wire.
func TestPingBehindBlockedWrite(t *testing.T) {
	conn, _ := openFake(t, startFake(t), Classic, Hooks{})
	huge := strings.Repeat("c", 64<<20) // far beyond what the socket buffers hold
	go func() { _ = conn.Subscribe(context.Background(), []string{huge}) }()
	require.Eventually(t, func() bool { return len(conn.wlock) == 1 }, 10*time.Second, time.Millisecond, "the write did not start")

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	res := make(chan error, 1)
	go func() { res <- conn.Ping(ctx) }()
	select {
	case err := <-res:
		assert.ErrorIs(t, err, context.DeadlineExceeded)
	case <-time.After(10 * time.Second):
		t.Fatal("Ping waits for the write lock past its ctx")
	}
	// Close ends the blocked write; a Ping then fails at once.
	conn.Close()
	assert.ErrorIs(t, conn.Ping(context.Background()), ErrClosed)
}

// TestWriteFailureIsTheCause: a write that fails (its ctx ended mid-write)
// closes the wire, and the wire's cause, which every other queued call
// gets, is that failure, not the closed socket the reader then meets.
func TestWriteFailureIsTheCause(t *testing.T) {
	conn, p := openFake(t, startFake(t), Classic, Hooks{})
	pingErr := make(chan error, 1)
	go func() { pingErr <- conn.Ping(context.Background()) }()
	p.expect("PING") // queued, never answered

	// The ctx ends once the write has begun (the fake has read its first
	// bytes) and is blocked (the fake reads no more): a deadline instead
	// could end it while the 64 MB were still being encoded on a busy
	// machine, and then nothing is written and the wire rightly stays up.
	huge := strings.Repeat("c", 64<<20)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	res := make(chan []error, 1)
	go func() { res <- conn.Subscribe(ctx, []string{huge}) }()
	_, err := io.ReadFull(p.r, make([]byte, 4096))
	require.NoError(t, err)
	cancel()
	errs := <-res
	require.ErrorIs(t, errs[0], context.Canceled)
	waitDone(t, conn)
	assert.ErrorIs(t, conn.Err(), context.Canceled, "the wire's cause")
	assert.NotErrorIs(t, conn.Err(), net.ErrClosed)
	assert.ErrorIs(t, <-pingErr, context.Canceled, "the queued call's error")
}

// TestConfirmationCutShort: a wire that fails inside the last
// confirmation a Subscribe waits for, after the channel and before the
// subscription count, fails that Subscribe instead of leaving it waiting
// for good.
func TestConfirmationCutShort(t *testing.T) {
	conn, p := openFake(t, startFake(t), Classic, Hooks{})
	res := make(chan []error, 1)
	go func() { res <- conn.Subscribe(context.Background(), []string{"a"}) }()
	p.expect("SUBSCRIBE", "a")
	p.send("*3\r\n$9\r\nsubscribe\r\n$1\r\na\r\n") // no count
	require.NoError(t, p.nc.Close())
	select {
	case errs := <-res:
		require.Len(t, errs, 1)
		assert.Error(t, errs[0])
	case <-time.After(10 * time.Second):
		t.Fatal("the Subscribe whose confirmation was cut short never returned")
	}
}

// TestPingBehindWriteToFrozenServer is TestPingBehindBlockedWrite on a
// real Redis frozen by SIGSTOP: a subscribe too big for the socket
// buffers blocks its write, and a Ping behind it gives up when its ctx
// ends; once the server thaws the subscribe completes.
func TestPingBehindWriteToFrozenServer(t *testing.T) {
	srv := redistest.StartStandalone(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := Open(ctx, Dialer{Addr: srv.Addr()}, Classic, Hooks{})
	require.NoError(t, err)
	defer conn.Close()

	require.NoError(t, srv.Pause())
	t.Cleanup(func() { _ = srv.Resume() })
	// 16 MiB of channel names, far beyond what the socket buffers hold.
	// (Not one huge name: its confirmation would exceed the pubsub output
	// buffer limit, and Redis would drop the client.)
	names := make([]string, 16<<10)
	for i := range names {
		names[i] = fmt.Sprintf("%d.%s", i, strings.Repeat("c", 1<<10))
	}
	res := make(chan []error, 1)
	go func() { res <- conn.Subscribe(ctx, names) }()
	require.Eventually(t, func() bool { return len(conn.wlock) == 1 }, 10*time.Second, time.Millisecond, "the write did not start")

	short, cancelShort := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancelShort()
	assert.ErrorIs(t, conn.Ping(short), context.DeadlineExceeded)

	require.NoError(t, srv.Resume())
	select {
	case errs := <-res:
		assert.Equal(t, []error{nil}, errs)
	case <-ctx.Done():
		t.Fatal("the subscribe did not complete after the server thawed")
	}
	assert.NoError(t, conn.Ping(ctx))
}
