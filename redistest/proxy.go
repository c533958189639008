package redistest

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Proxy forwards TCP connections to a Redis server and can swallow the
// Pub/Sub message pushes the server sends while everything else passes:
// command replies, PONGs, subscribe confirmations. It makes the fault no
// health check sees: a subscribe connection that answers pings while some
// or all of its messages no longer arrive. It speaks RESP2 only.
type Proxy struct {
	ln      net.Listener
	target  string
	drop    atomic.Pointer[func(kind, channel string) bool]
	dropped atomic.Int64
	stalled atomic.Bool
	wg      sync.WaitGroup

	mu     sync.Mutex
	conns  []net.Conn
	closed bool
}

// StartProxy listens on a free loopback port and forwards every
// connection it accepts to target. It is closed, with its connections,
// when the test ends.
func StartProxy(tb testing.TB, target string) *Proxy {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("redistest: proxy listen: %v", err)
	}
	p := &Proxy{ln: ln, target: target}
	p.wg.Go(p.accept)
	tb.Cleanup(p.close)
	return p
}

// Addr returns the address clients connect to.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Port returns the port clients connect to.
func (p *Proxy) Port() int { return p.ln.Addr().(*net.TCPAddr).Port }

// DropPushes makes the proxy swallow, from then on, every message push
// ("message" or "smessage", as kind) on a channel drop returns true for;
// nil lets every push through again. drop runs on the proxy's goroutines.
func (p *Proxy) DropPushes(drop func(kind, channel string) bool) {
	if drop == nil {
		p.drop.Store(nil)
		return
	}
	p.drop.Store(&drop)
}

// Stall makes the proxy stop reading what the servers send (on) or read
// again (off), as a client that fell behind: the server's output buffer
// for the connection fills, and past its limit the server drops the
// client. The proxy's socket to the server has a small receive buffer
// (proxyReadBuffer), so that the stall reaches the server soon.
func (p *Proxy) Stall(on bool) { p.stalled.Store(on) }

// proxyReadBuffer is the receive buffer of the proxy's sockets to servers.
const proxyReadBuffer = 64 << 10

// Dropped returns how many pushes the proxy has swallowed.
func (p *Proxy) Dropped() int64 { return p.dropped.Load() }

func (p *Proxy) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = client.Close()
			continue
		}
		if tc, ok := server.(*net.TCPConn); ok {
			_ = tc.SetReadBuffer(proxyReadBuffer)
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = client.Close()
			_ = server.Close()
			return
		}
		p.conns = append(p.conns, client, server)
		p.mu.Unlock()
		p.wg.Go(func() { _, _ = io.Copy(server, client); _ = server.Close() })
		p.wg.Go(func() { p.replies(client, server); _ = client.Close() })
	}
}

// replies copies what the server sends to the client one RESP value at a
// time, leaving out the pushes DropPushes picked.
func (p *Proxy) replies(client, server net.Conn) {
	r := bufio.NewReader(server)
	var buf []byte
	for {
		for p.stalled.Load() && !p.isClosed() {
			time.Sleep(time.Millisecond)
		}
		var err error
		buf, err = appendValue(r, buf[:0])
		if err != nil {
			return
		}
		if drop := p.drop.Load(); drop != nil {
			if kind, channel, ok := messagePush(buf); ok && (*drop)(kind, channel) {
				p.dropped.Add(1)
				continue
			}
		}
		if _, err := client.Write(buf); err != nil {
			return
		}
	}
}

// messagePush returns the kind and channel of a whole RESP2 value that is
// a message push: *3, "message" or "smessage", the channel, the payload.
func messagePush(v []byte) (kind, channel string, ok bool) {
	for _, k := range []string{"message", "smessage"} {
		head := "*3\r\n$" + strconv.Itoa(len(k)) + "\r\n" + k + "\r\n$"
		if !bytes.HasPrefix(v, []byte(head)) {
			continue
		}
		rest := v[len(head):]
		end := bytes.IndexByte(rest, '\r')
		if end < 0 {
			return "", "", false
		}
		n, err := strconv.Atoi(string(rest[:end]))
		start := end + 2
		if err != nil || n < 0 || start+n > len(rest) {
			return "", "", false
		}
		return k, string(rest[start : start+n]), true
	}
	return "", "", false
}

// appendValue appends one whole RESP2 value read from r to buf.
func appendValue(r *bufio.Reader, buf []byte) ([]byte, error) {
	line, err := r.ReadSlice('\n')
	if err != nil {
		return buf, err
	}
	buf = append(buf, line...)
	if len(line) < 3 {
		return buf, errors.New("redistest: proxy: short RESP line")
	}
	switch line[0] {
	case '$', '*':
		n, err := strconv.Atoi(string(line[1 : len(line)-2]))
		if err != nil {
			return buf, errors.New("redistest: proxy: bad RESP length")
		}
		if line[0] == '$' {
			if n >= 0 {
				start := len(buf)
				buf = append(buf, make([]byte, n+2)...)
				if _, err := io.ReadFull(r, buf[start:]); err != nil {
					return buf, err
				}
			}
			return buf, nil
		}
		for range max(n, 0) {
			if buf, err = appendValue(r, buf); err != nil {
				return buf, err
			}
		}
	}
	return buf, nil
}

func (p *Proxy) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

// close stops accepting, closes every forwarded connection and waits for
// the proxy's goroutines.
func (p *Proxy) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	p.closed = true
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
