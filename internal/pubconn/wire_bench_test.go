package pubconn

import (
	"bufio"
	"context"
	"io"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/shardcast/shardcast/internal/subconn"
)

// BenchmarkPublishWire measures the publish wire's own cost per call,
// without Redis: 128 callers (issue 15's 128 publishers) make enveloped
// 256-byte Publish calls, each waiting for its reply with a context that
// can end (as a server's request context can), against an in-process
// server that answers every PUBLISH with :1 as Redis does, a batch of
// replies per read. Run with -cpu 1: every goroutine, the server's
// included, then shares one core, and ns/op is the CPU per call of the
// callers, the Pub's reader and writes, and the stand-in server (which
// costs the same before and after a change), with none of the scheduling
// noise of a real server on another core.
func BenchmarkPublishWire(b *testing.B) {
	addr := startReplier(b)
	p := newPub(b, subconn.Dialer{Addr: addr}, 5*time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := p.Ping(ctx); err != nil {
		b.Fatal(err)
	}
	payload := make([]byte, 256)
	b.SetParallelism(128)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := p.Publish(ctx, "bench", payload, false, time.Now()); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// startReplier starts a server on a loopback port that answers each
// command of three or fewer arguments with :1, writing its replies once it
// has read every command it holds, and returns its address. It stops with
// the benchmark.
func startReplier(b *testing.B) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	var conns []net.Conn
	var mu sync.Mutex
	b.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() { reply(c) })
		}
	})
	return ln.Addr().String()
}

// reply answers the commands read from c until it fails: PING with
// +PONG, any other with :1.
func reply(c net.Conn) {
	br := bufio.NewReaderSize(c, 64<<10)
	out := make([]byte, 0, 64<<10)
	for {
		line, err := br.ReadSlice('\n')
		if err != nil || len(line) < 4 || line[0] != '*' {
			return
		}
		n, err := strconv.Atoi(string(line[1 : len(line)-2]))
		if err != nil {
			return
		}
		ping := false
		for i := range n {
			line, err = br.ReadSlice('\n')
			if err != nil || len(line) < 4 || line[0] != '$' {
				return
			}
			size, err := strconv.Atoi(string(line[1 : len(line)-2]))
			if err != nil {
				return
			}
			if i == 0 && size == 4 {
				name, err := br.Peek(4)
				if err != nil {
					return
				}
				ping = string(name) == "PING"
			}
			if _, err := br.Discard(size + 2); err != nil {
				return
			}
		}
		if ping {
			out = append(out, "+PONG\r\n"...)
		} else {
			out = append(out, ":1\r\n"...)
		}
		if br.Buffered() == 0 {
			if _, err := c.Write(out); err != nil {
				return
			}
			out = out[:0]
		}
	}
}

// BenchmarkReadReplies measures the publish wire's reader alone, with no
// socket and no goroutine to wake: integer replies arrive 32 to a read
// (about what one read brings at 128 synchronous publishers), each
// matched to a call of PublishAsync queued just before the read, as the
// publishers would have. ns/op is the reader's cost per reply, the
// queueing of the calls included.
func BenchmarkReadReplies(b *testing.B) {
	p := New(subconn.Dialer{Addr: "127.0.0.1:1"}, Timeouts{})
	done := 0
	rc := &replyConn{left: b.N, per: 32, fn: func(err error) {
		if err != nil {
			b.Error(err)
		}
		done++
	}}
	w := &wire{nc: rc}
	rc.w = w
	p.mu.Lock()
	p.w = w
	p.wires.Add(1)
	p.mu.Unlock()
	b.ReportAllocs()
	b.ResetTimer()
	p.read(w) // until the replies run out
	b.StopTimer()
	if done != b.N {
		b.Fatalf("%d calls completed, want %d", done, b.N)
	}
}

// replyConn serves a reader per replies to Read, after queueing as many
// calls of fn on w, until left runs out.
type replyConn struct {
	net.Conn // nil: only the methods below are used
	w        *wire
	fn       func(error)
	left     int
	per      int
}

func (c *replyConn) Read(buf []byte) (int, error) {
	k := min(c.per, c.left, len(buf)/4)
	if k == 0 {
		return 0, io.EOF
	}
	c.w.mu.Lock()
	for range k {
		cl := calls.Get().(*call)
		cl.fn = c.fn
		c.w.enqueue(cl)
	}
	c.w.sent = c.w.queued
	c.w.mu.Unlock()
	c.left -= k
	for i := range k {
		copy(buf[4*i:], ":1\r\n")
	}
	return 4 * k, nil
}

func (c *replyConn) Close() error { return nil }
