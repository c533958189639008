package pubconn

import (
	"bufio"
	"context"
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
