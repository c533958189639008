package pubconn

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardcast/shardcast/internal/subconn"
	"github.com/shardcast/shardcast/redistest"
)

// heldConn passes writes to a real connection, then holds the writer, as a
// preemption right after the write syscall would, until released. Its
// reads deliver nothing until Close.
type heldConn struct {
	net.Conn
	written, release, closed chan struct{}
	once                     sync.Once
}

func (c *heldConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	close(c.written)
	<-c.release
	return n, err
}

func (c *heldConn) Read([]byte) (int, error) { <-c.closed; return 0, net.ErrClosed }

func (c *heldConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

// TestFailureDuringWriteIsNotNotSent: a command whose write is still in
// progress when the wire fails may have reached Redis (here it has): its
// caller is not told ErrNotSent, which would invite a resend and a
// duplicate.
func TestFailureDuringWriteIsNotNotSent(t *testing.T) {
	s := redistest.StartStandalone(t)
	col := subscribe(t, s, "inflight")
	raw, err := subconn.Dialer{Addr: s.Addr()}.Dial(testCtx(t))
	require.NoError(t, err)
	hc := &heldConn{Conn: raw, written: make(chan struct{}), release: make(chan struct{}), closed: make(chan struct{})}

	p := New(subconn.Dialer{Addr: s.Addr()}, Timeouts{Write: 5 * time.Second, Reply: 5 * time.Second})
	w := &wire{nc: hc}
	p.mu.Lock()
	p.w = w
	p.cur.Store(w)
	p.wires.Add(1)
	p.mu.Unlock()
	go p.read(w)

	outcome := make(chan error, 1)
	sent := make(chan error, 1)
	go func() {
		sent <- p.PublishAsync(context.Background(), "inflight", []byte("m"), true, time.Time{}, func(err error) { outcome <- err })
	}()
	<-hc.written
	waitFor(t, "Redis to publish it", func() bool { return col.len() == 1 })
	p.Close() // the reader fails the queue while the write has not returned
	var got error
	select {
	case got = <-outcome:
	case <-time.After(10 * time.Second):
		t.Fatal("no outcome")
	}
	close(hc.release)
	require.NoError(t, <-sent)
	require.Error(t, got)
	assert.False(t, errors.Is(got, ErrNotSent), "Redis published it, yet the caller may resend it: %v", got)
}

// TestLoginBoundedByDialTimeout: the login of a dial on demand is bounded
// by the dialer's timeout, not only by the caller's ctx: a server that
// accepts connections and never answers cannot hold a Publish whose ctx
// has no deadline.
func TestLoginBoundedByDialTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var mu sync.Mutex
	var accepted []net.Conn
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			accepted = append(accepted, nc) // read nothing, answer nothing
			mu.Unlock()
		}
	}()
	defer func() {
		_ = ln.Close()
		mu.Lock()
		for _, nc := range accepted {
			_ = nc.Close()
		}
		mu.Unlock()
	}()
	p := newPubWith(t, subconn.Dialer{Addr: ln.Addr().String(), Password: "pw", Timeout: 300 * time.Millisecond},
		Timeouts{Write: time.Second, Reply: time.Second, Redial: 50 * time.Millisecond})
	res := make(chan error, 1)
	go func() { res <- p.Publish(context.Background(), "c", []byte("x"), true, time.Time{}) }()
	select {
	case err := <-res:
		assert.ErrorIs(t, err, ErrNotSent)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
	case <-time.After(10 * time.Second):
		t.Fatal("Publish waits in the login past the dial timeout")
	}
}

// TestResendTimedFromItsCall: a resend keeps its first attempt's stamp,
// which may be older than the reply timeout; the watchdog times its reply
// from the resend, so that a server pause shorter than the timeout does not
// drop the wire.
func TestResendTimedFromItsCall(t *testing.T) {
	s := redistest.StartStandalone(t)
	p := newPubWith(t, subconn.Dialer{Addr: s.Addr()}, Timeouts{Write: 5 * time.Second, Reply: 2 * time.Second})
	ctx := testCtx(t)
	// Arms the watchdog: it looks next 2 s from now, during the pause.
	require.NoError(t, p.SPublish(ctx, "", "c", []byte("first"), true, time.Now()))
	time.Sleep(1800 * time.Millisecond)
	thaw := freeze(t, s)
	go func() { time.Sleep(600 * time.Millisecond); thaw() }()
	stamp := time.Now().Add(-time.Minute) // a first attempt long ago
	require.NoError(t, p.SPublishAgain(ctx, "", "c", []byte("again"), true, stamp),
		"a 600 ms pause with a 2 s reply timeout")
}
