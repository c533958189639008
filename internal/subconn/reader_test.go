package subconn

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardcast/shardcast/internal/resp"
)

// RESP2 encoders for the bytes a server sends.

func bulkOf(s string) string { return fmt.Sprintf("$%d\r\n%s\r\n", len(s), s) }

// confirmation is a (un)subscribe reply or notice: [kind, channel, count].
func confirmation(kind, channel string, count int) string {
	return "*3\r\n" + bulkOf(kind) + bulkOf(channel) + fmt.Sprintf(":%d\r\n", count)
}

// pushMessage is a "message" or "smessage" push.
func pushMessage(kind, channel, payload string) string {
	return "*3\r\n" + bulkOf(kind) + bulkOf(channel) + bulkOf(payload)
}

// subscribedPong is the reply to PING of a connection in subscribed mode.
const subscribedPong = "*2\r\n$4\r\npong\r\n$0\r\n\r\n"

// offlineConn is a Conn without a socket or a reader goroutine, for driving
// readLoop directly; calls are already queued, as if sent.
func offlineConn(hooks Hooks, calls ...*call) *Conn {
	return &Conn{hooks: hooks, queue: calls}
}

func pendingCall(kind callKind, chans ...string) *call {
	return &call{kind: kind, chans: chans, done: make(chan struct{})}
}

func completed(cl *call) bool {
	select {
	case <-cl.done:
		return true
	default:
		return false
	}
}

// feeds are the ways a test stream reaches the parser: all at once, one
// byte per Read (every value straddles reads), or half of what is asked.
var feeds = map[string]func(io.Reader) io.Reader{
	"whole":   func(r io.Reader) io.Reader { return r },
	"onebyte": iotest.OneByteReader,
	"half":    iotest.HalfReader,
}

func runLoop(c *Conn, stream string, size int, feed func(io.Reader) io.Reader) error {
	return c.readLoop(resp.NewReader(bufio.NewReaderSize(feed(strings.NewReader(stream)), size)))
}

// log records hook calls in order.
type log struct {
	mu     sync.Mutex
	events []string
}

func (l *log) hooks() Hooks {
	return Hooks{
		OnMessage: func(ch string, p []byte) { l.add(fmt.Sprintf("msg %s %q", ch, p)) },
		OnLost:    func(ch string) { l.add("lost " + ch) },
	}
}

func (l *log) add(e string) { l.mu.Lock(); l.events = append(l.events, e); l.mu.Unlock() }

func (l *log) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.events...)
}

// TestReadLoopAcrossBufferSizes runs one stream with every kind of reply a
// subscribe connection gets through read buffers from bufio's minimum up
// to the real one, fed whole, byte by byte and in halves: payloads that fit
// the buffer (zero-copy view) and payloads that do not (scratch copy) must
// arrive identical, and every reply must answer the right call.
func TestReadLoopAcrossBufferSizes(t *testing.T) {
	sizes := []int{0, 1, 2, 12, 13, 14, 15, 16, 17, 100, 5000}
	payload := func(n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte('a' + (i*7+n)%26)
		}
		return string(b)
	}
	var stream strings.Builder
	var want []string
	stream.WriteString(confirmation("subscribe", "a", 1))
	stream.WriteString(confirmation("subscribe", "b", 2))
	stream.WriteString(confirmation("subscribe", "a", 2)) // a duplicate in the command
	for i, n := range sizes {
		ch := []string{"a", "b"}[i%2]
		stream.WriteString(pushMessage("message", ch, payload(n)))
		want = append(want, fmt.Sprintf("msg %s %q", ch, payload(n)))
	}
	stream.WriteString(subscribedPong)
	// A pattern message this connection never asked for is skipped whole.
	stream.WriteString("*4\r\n" + bulkOf("pmessage") + bulkOf("p*") + bulkOf("pq") + bulkOf(payload(40)))
	stream.WriteString(pushMessage("message", "unknown", "x"))
	want = append(want, `msg unknown "x"`)
	stream.WriteString(confirmation("unsubscribe", "b", 1))                // server-pushed: nobody asked
	stream.WriteString(confirmation("unsubscribe", "a", 0))                // ours
	stream.WriteString("*3\r\n" + bulkOf("unsubscribe") + "$-1\r\n:0\r\n") // no channel: ignored
	stream.WriteString("+PONG\r\n")                                        // ends the unsubscribe (the PING sent behind it)
	stream.WriteString("+PONG\r\n")                                        // the second Ping
	stream.WriteString("-ERR no\r\n")
	want = append(want, "lost b")

	for _, size := range []int{16, 17, 23, 64, 4096, readBufferSize} {
		for name, feed := range feeds {
			t.Run(fmt.Sprintf("%d/%s", size, name), func(t *testing.T) {
				var l log
				sub := pendingCall(callSubscribe, "a", "b", "a")
				ping := pendingCall(callPing)
				unsub := pendingCall(callUnsubscribe, "a")
				ping2 := pendingCall(callPing)
				errCall := pendingCall(callSubscribe, "c")
				c := offlineConn(l.hooks(), sub, ping, unsub, ping2, errCall)

				err := runLoop(c, stream.String(), size, feed)
				require.ErrorIs(t, err, io.EOF, "the stream parses to its end")
				assert.Equal(t, want, l.all())
				for i, cl := range []*call{sub, ping, unsub, ping2} {
					require.True(t, completed(cl), "call %d", i)
					assert.NoError(t, cl.err, "call %d", i)
				}
				require.True(t, completed(errCall))
				se, ok := resp.IsServerError(errCall.err)
				require.True(t, ok, "%v", errCall.err)
				assert.Equal(t, "ERR no", se.Msg)
				assert.Empty(t, c.queue)
			})
		}
	}
}

// TestReadMessageAllocatesNothing pins the hot path's promise: a message on
// a subscribed channel reaches OnMessage without a heap allocation.
func TestReadMessageAllocatesNothing(t *testing.T) {
	msg := pushMessage("message", "room", strings.Repeat("p", 256))
	c := offlineConn(Hooks{OnMessage: func(string, []byte) {}})
	src := strings.NewReader(msg)
	br := bufio.NewReaderSize(src, readBufferSize)
	rd := resp.NewReader(br)
	var err error
	allocs := testing.AllocsPerRun(1000, func() {
		src.Reset(msg)
		br.Reset(src) // keeps its buffer
		var line []byte
		var n int
		if line, err = rd.Line(); err != nil {
			return
		}
		if n, err = resp.ParseInt(line[1:]); err != nil {
			return
		}
		err = c.readPush(rd, n)
	})
	require.NoError(t, err)
	assert.Zero(t, allocs)
}

// TestReadLoopProtocolErrors: every reply the connection cannot fit to its
// commands, and every malformed value, ends the loop with ErrProtocol.
func TestReadLoopProtocolErrors(t *testing.T) {
	cases := []struct {
		name   string
		queue  []*call
		stream string
	}{
		{"subscribe confirmation with nothing pending", nil, confirmation("subscribe", "a", 1)},
		{"subscribe confirmation for another channel", []*call{pendingCall(callSubscribe, "a")}, confirmation("subscribe", "b", 1)},
		{"subscribe confirmation while a ping waits", []*call{pendingCall(callPing)}, confirmation("subscribe", "a", 1)},
		{"subscribe confirmation while an unsubscribe waits", []*call{pendingCall(callUnsubscribe, "a")}, confirmation("subscribe", "a", 1)},
		{"subscribe confirmation without a channel", []*call{pendingCall(callSubscribe, "a")}, "*3\r\n" + bulkOf("subscribe") + "$-1\r\n:1\r\n"},
		{"one confirmation too many", []*call{pendingCall(callSubscribe, "a")}, confirmation("subscribe", "a", 1) + confirmation("subscribe", "a", 1)},
		{"unknown type byte", []*call{pendingCall(callSubscribe, "a")}, "?x\r\n"},
		{"status while a subscribe waits", []*call{pendingCall(callSubscribe, "a")}, "+OK\r\n"},
		{"status with nothing pending", nil, "+PONG\r\n"},
		{"error with nothing pending", nil, "-ERR x\r\n"},
		{"subscribed pong while a subscribe waits", []*call{pendingCall(callSubscribe, "a")}, subscribedPong},
		{"subscribed pong with nothing pending", nil, subscribedPong},
		{"empty array", nil, "*0\r\n"},
		{"null array", nil, "*-1\r\n"},
		{"bad array length", nil, "*3x\r\n"},
		{"array length without digits", nil, "*\r\n"},
		{"array length of 19 digits", nil, "*1234567890123456789\r\n"},
		{"line without CR", nil, "*3\n"},
		{"line too short", nil, "\r\n"},
		{"line longer than the buffer", nil, "+" + strings.Repeat("x", readBufferSize) + "\r\n"},
		{"integer where a bulk belongs", nil, "*3\r\n:1\r\n"},
		{"bad bulk length", nil, "*3\r\n$1x\r\n"},
		{"bulk not terminated", nil, "*3\r\n" + bulkOf("message") + bulkOf("a") + "$3\r\nabcd\r\n"},
		{"large bulk not terminated", nil, "*3\r\n" + bulkOf("message") + bulkOf("a") + fmt.Sprintf("$%d\r\n%sxx", readBufferSize, strings.Repeat("z", readBufferSize))},
		{"bad value in a skipped element", nil, "*4\r\n" + bulkOf("pmessage") + "?\r\n"},
		{"bad length in a skipped element", nil, "*4\r\n" + bulkOf("pmessage") + "$x\r\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var l log
			c := offlineConn(l.hooks(), tc.queue...)
			err := runLoop(c, tc.stream+subscribedPong, readBufferSize, feeds["whole"])
			require.ErrorIs(t, err, resp.ErrProtocol)
			assert.Empty(t, l.all())
		})
	}
}

// TestReadLoopTruncatedStream: a stream cut short is an I/O error, not a
// protocol error, wherever it is cut.
func TestReadLoopTruncatedStream(t *testing.T) {
	full := confirmation("subscribe", "a", 1) + pushMessage("message", "a", strings.Repeat("q", 40))
	for cut := 1; cut < len(full); cut++ {
		c := offlineConn(Hooks{}, pendingCall(callSubscribe, "a"))
		err := runLoop(c, full[:cut], 16, feeds["whole"])
		require.Error(t, err, "cut at %d", cut)
		assert.True(t, errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF), "cut at %d: %v", cut, err)
	}
}

// TestHugeBulkLengthAllocatesNothing: a corrupt bulk length must not make
// the reader allocate it up front (which panics or kills the process with
// out of memory); the stream simply ends short.
func TestHugeBulkLengthAllocatesNothing(t *testing.T) {
	for _, n := range []string{"999999999999999999", "1099511627776"} {
		c := offlineConn(Hooks{OnMessage: func(string, []byte) {}})
		stream := "*3\r\n" + bulkOf("message") + bulkOf("a") + "$" + n + "\r\n" + strings.Repeat("z", 3*readBufferSize)
		err := runLoop(c, stream, readBufferSize, feeds["whole"])
		require.ErrorIs(t, err, io.ErrUnexpectedEOF, "length %s", n)
	}
}

// TestSkipDeeplyNestedArrays: skipping a value the connection does not use
// must not recurse once per nesting level, or a hostile stream overflows
// the reader goroutine's stack, which kills the process.
func TestSkipDeeplyNestedArrays(t *testing.T) {
	old := debug.SetMaxStack(1 << 20)
	defer debug.SetMaxStack(old)
	ping := pendingCall(callPing)
	c := offlineConn(Hooks{}, ping)
	stream := "*2\r\n" + bulkOf("pmessage") + strings.Repeat("*1\r\n", 200_000) + ":1\r\n" + subscribedPong
	err := runLoop(c, stream, readBufferSize, feeds["whole"])
	require.ErrorIs(t, err, io.EOF)
	require.True(t, completed(ping), "the pong after the skipped value answers the ping")
}

// TestUnsubscribeEndingUnconfirmed: an unsubscribe whose PING answers
// before every channel was confirmed (no conforming server does this)
// fails with ErrProtocol rather than passing for confirmed, so the
// engines drop the wire instead of trusting it.
func TestUnsubscribeEndingUnconfirmed(t *testing.T) {
	unsub := pendingCall(callUnsubscribe, "a", "b")
	c := offlineConn(Hooks{}, unsub)
	err := runLoop(c, confirmation("unsubscribe", "a", 1)+"+PONG\r\n", 64, feeds["whole"])
	require.ErrorIs(t, err, io.EOF, "the stream parses to its end")
	require.True(t, completed(unsub))
	assert.ErrorIs(t, unsub.err, resp.ErrProtocol)
}
