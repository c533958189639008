package subconn

import (
	"context"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// replayConn is an in-memory net.Conn playing a server: once the client
// has written (its subscribe command), reads return head; once start is
// closed, they return n copies of each message of body in turn, then
// io.EOF. Writes are discarded. Nothing in Read allocates, so what a
// benchmark counts is the connection's own read path.
type replayConn struct {
	head    []byte
	body    []byte // whole messages; the stream holds msgs of them
	msgLen  int    // every message of body is this long
	msgs    int
	started chan struct{} // closed by the first Write
	start   chan struct{} // closed by the benchmark when it starts timing
	once    sync.Once
	closed  chan struct{}
	cOnce   sync.Once

	served int // bytes of the stream after head already read
}

func newReplayConn(head string, body []string, msgs int) *replayConn {
	return &replayConn{
		head: []byte(head), body: []byte(strings.Join(body, "")), msgLen: len(body[0]), msgs: msgs,
		started: make(chan struct{}), start: make(chan struct{}), closed: make(chan struct{}),
	}
}

func (r *replayConn) Read(p []byte) (int, error) {
	for _, gate := range []chan struct{}{r.started, r.start} {
		select {
		case <-gate:
		case <-r.closed:
			return 0, net.ErrClosed
		}
		if len(r.head) > 0 {
			n := copy(p, r.head)
			r.head = r.head[n:]
			return n, nil
		}
	}
	total := r.msgs * r.msgLen
	if r.served == total {
		return 0, io.EOF
	}
	n := 0
	for n < len(p) && r.served < total {
		off := r.served % len(r.body)
		k := copy(p[n:min(len(p), n+total-r.served)], r.body[off:])
		n += k
		r.served += k
	}
	return n, nil
}

func (r *replayConn) Write(p []byte) (int, error) {
	r.once.Do(func() { close(r.started) })
	return len(p), nil
}

func (r *replayConn) Close() error                     { r.cOnce.Do(func() { close(r.closed) }); return nil }
func (r *replayConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (r *replayConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (r *replayConn) SetDeadline(time.Time) error      { return nil }
func (r *replayConn) SetReadDeadline(time.Time) error  { return nil }
func (r *replayConn) SetWriteDeadline(time.Time) error { return nil }

// BenchmarkReadMessage measures the read path of a subscribed connection,
// from the connection's bytes to the OnMessage hook: one op is one
// "message" push with a 256-byte payload on one of the 4 channels the
// connection subscribed. Expect 0 allocs/op.
func BenchmarkReadMessage(b *testing.B) {
	for _, mode := range []Mode{Classic, Sharded} {
		name, kind, confirm := "classic", "message", "subscribe"
		if mode == Sharded {
			name, kind, confirm = "sharded", "smessage", "ssubscribe"
		}
		b.Run(name, func(b *testing.B) { benchReadMessage(b, mode, kind, confirm) })
	}
}

func benchReadMessage(b *testing.B, mode Mode, kind, confirm string) {
	channels := []string{"bench.room.0", "bench.room.1", "bench.room.2", "bench.room.3"}
	payload := strings.Repeat("p", 256)
	var head strings.Builder
	body := make([]string, len(channels))
	for i, ch := range channels {
		head.WriteString(confirmation(confirm, ch, i+1))
		body[i] = pushMessage(kind, ch, payload)
	}
	rc := newReplayConn(head.String(), body, b.N)
	var got, bytes int // written by the reader goroutine, read after Done
	c := newConn(rc, mode, Hooks{OnMessage: func(_ string, p []byte) { got++; bytes += len(p) }})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, err := range c.Subscribe(ctx, channels) {
		if err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(int64(rc.msgLen))
	b.ReportAllocs()
	b.ResetTimer()
	close(rc.start)
	<-c.Done()
	b.StopTimer()
	if got != b.N || bytes != b.N*len(payload) {
		b.Fatalf("delivered %d messages (%d payload bytes), want %d", got, bytes, b.N)
	}
	if err := c.Err(); err != io.EOF {
		b.Fatalf("the stream should end with io.EOF, got %v", err)
	}
}
