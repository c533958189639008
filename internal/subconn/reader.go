package subconn

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"unsafe"

	"github.com/shardcast/shardcast/internal/resp"
)

// read runs the read loop until the wire fails or is closed, then fails
// every queued call.
func (c *Conn) read() {
	defer close(c.readerDone)
	var src io.Reader = c.nc
	if c.hooks.OnIdle != nil {
		src = idleReader{c.nc, c.hooks.OnIdle}
	}
	br := readBuffers.Get().(*bufio.Reader)
	br.Reset(src)
	err := c.readLoop(resp.NewReader(br))
	if c.hooks.OnIdle != nil {
		c.hooks.OnIdle() // a reply cut short by the failure ends a batch too
	}
	br.Reset(nil) // nothing read from it is in use any more (see Hooks)
	readBuffers.Put(br)
	if c.closing.Load() {
		err = ErrClosed
	}
	// The cause is recorded before the wire is closed: a write failing on
	// the closed wire then reports it (see send), not "use of closed
	// network connection".
	c.mu.Lock()
	if c.werr != nil && !c.closing.Load() && errors.Is(err, net.ErrClosed) {
		// The failed write closed the wire under the reader: its error is
		// the cause. (A reader that failed for a reason of its own, such
		// as the server's refusal at maxclients, keeps that one.)
		err = c.werr
	}
	c.err = err
	c.mu.Unlock()
	_ = c.nc.Close()
	c.qmu.Lock()
	c.dead = true
	queue := c.queue
	c.queue = nil
	c.qmu.Unlock()
	for _, cl := range queue {
		cl.err = err
		close(cl.done)
	}
	// Last, so that once Done is closed every command fails with Err.
	close(c.done)
}

// readBuffers holds the read buffers of connections gone. After a
// reconnect storm each new connection takes one a dead connection left,
// instead of readBufferSize of fresh memory faulted in page by page while
// the storm is on (600 connections at 200 cluster brokers): nothing frees
// the old ones until the next collection.
var readBuffers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, readBufferSize) }}

// idleReader calls idle before every read from r: the buffered reader
// above it reads only once it has handed out everything it holds.
type idleReader struct {
	r    io.Reader
	idle func()
}

func (ir idleReader) Read(p []byte) (int, error) {
	ir.idle()
	return ir.r.Read(p)
}

func (c *Conn) readLoop(rd *resp.Reader) error {
	for {
		if c.readBufferedMessage(rd) {
			continue
		}
		line, err := rd.Line()
		if err != nil {
			return err
		}
		c.reads.Add(1)
		switch line[0] {
		case '*':
			n, err := resp.ParseInt(line[1:])
			if err != nil {
				return err
			}
			if err := c.readPush(rd, n); err != nil {
				return err
			}
		case '+':
			if err := c.simple(line[1:]); err != nil {
				return err
			}
		case '-':
			if err := c.failed(&resp.ServerError{Msg: string(line[1:])}); err != nil {
				return err
			}
		default:
			return fmt.Errorf("%w: unexpected reply %q", resp.ErrProtocol, line)
		}
	}
}

// readPush handles one array of n elements: a message, a (un)subscribe
// confirmation or notice, or the pong of a subscribed connection.
func (c *Conn) readPush(rd *resp.Reader, n int) error {
	if n < 1 {
		return fmt.Errorf("%w: empty array", resp.ErrProtocol)
	}
	kind, null, err := rd.Bulk()
	if err != nil {
		return err
	}
	if null {
		return rd.Skip(n - 1)
	}
	// Classify while kind still points into the read buffer.
	const (
		other = iota
		message
		subscribed
		unsubscribed
		pong
	)
	what := other
	switch string(kind) {
	case "message", "smessage":
		what = message
	case "subscribe", "ssubscribe":
		what = subscribed
	case "unsubscribe", "sunsubscribe":
		what = unsubscribed
	case "pong":
		what = pong
	}
	switch {
	case n == 3 && what == message:
		return c.readMessage(rd)
	case n == 3 && what == subscribed:
		return c.readConfirmation(rd, true)
	case n == 3 && what == unsubscribed:
		return c.readConfirmation(rd, false)
	case n == 2 && what == pong:
		if err := rd.Skip(1); err != nil {
			return err
		}
		return c.pong()
	default: // pmessage and anything else this connection never asked for
		return rd.Skip(n - 1)
	}
}

// readBufferedMessage hands a message push that the read buffer holds
// whole to OnMessage, channel and payload as views of the buffer, and
// reports whether it did; anything else is left to readLoop's
// value-by-value path (readMessage for a message that is still arriving).
func (c *Conn) readBufferedMessage(rd *resp.Reader) bool {
	kind, name, payload, size, ok := rd.PeekBulks3()
	if !ok || (string(kind) != "message" && string(kind) != "smessage") {
		return false
	}
	rd.Discard(size)
	c.reads.Add(1)
	if c.hooks.OnMessage != nil && !c.closing.Load() {
		c.hooks.OnMessage(unsafe.String(unsafe.SliceData(name), len(name)), payload)
	}
	return true
}

func (c *Conn) readMessage(rd *resp.Reader) error {
	name, err := c.readChannel(rd)
	if err != nil {
		return err
	}
	payload, _, err := rd.Bulk()
	if err != nil {
		return err
	}
	if c.hooks.OnMessage != nil && !c.closing.Load() {
		c.hooks.OnMessage(name, payload)
	}
	return nil
}

// readChannel reads a channel name into c.chanBuf and returns a string
// view of it, valid until the next message.
func (c *Conn) readChannel(rd *resp.Reader) (string, error) {
	b, null, err := rd.Bulk()
	if err != nil || null {
		return "", err
	}
	c.chanBuf = append(c.chanBuf[:0], b...)
	return unsafe.String(unsafe.SliceData(c.chanBuf), len(c.chanBuf)), nil
}

// readConfirmation matches a (un)subscribe reply with the head of the
// queue: Redis answers a command with one confirmation per channel, in the
// command's order. A subscribe call is complete with its last
// confirmation. An unsubscribe call is complete only at the pong of the
// PING sent behind it: the server may drop a channel on its own (a slot
// moved away) just before running our unsubscribe of it, and then its
// notice is indistinguishable from our confirmation and our command is
// answered with an error instead (MOVED), which belongs to the same call.
// An unsubscribe notice no call is waiting for goes to OnLost.
func (c *Conn) readConfirmation(rd *resp.Reader, subscribe bool) error {
	ch, null, err := rd.Bulk()
	if err != nil {
		return err
	}
	want := callUnsubscribe
	if subscribe {
		want = callSubscribe
	}
	var matched bool
	var completed *call
	c.qmu.Lock()
	if len(c.queue) > 0 && !null {
		head := c.queue[0]
		if head.kind == want && head.next < len(head.chans) && head.is(head.next, ch) {
			matched = true
			head.next++
			if subscribe && head.next == len(head.chans) {
				c.pop()
				completed = head
			}
		}
	}
	c.qmu.Unlock()
	var lost string
	if !matched && !null && !subscribe {
		lost = string(ch)
	}
	if subscribe && !matched {
		err = fmt.Errorf("%w: subscribe confirmation for %q matches no command", resp.ErrProtocol, ch)
	}
	if err != nil {
		return err
	}
	if err := rd.Skip(1); err != nil { // the subscription count
		if completed != nil {
			// Popped already: the reader's last act, failing the queue,
			// would not reach it.
			completed.err = err
			close(completed.done)
		}
		return err
	}
	if lost != "" && c.hooks.OnLost != nil && !c.closing.Load() {
		c.hooks.OnLost(lost)
	}
	if completed != nil {
		close(completed.done)
	}
	return nil
}

// pong completes the call waiting for a PING reply: a Ping, or an
// unsubscribe (see readConfirmation).
func (c *Conn) pong() error {
	c.qmu.Lock()
	if len(c.queue) == 0 || (c.queue[0].kind != callPing && c.queue[0].kind != callUnsubscribe) {
		c.qmu.Unlock()
		return fmt.Errorf("%w: PONG with no PING waiting", resp.ErrProtocol)
	}
	head := c.queue[0]
	c.pop()
	c.qmu.Unlock()
	if head.kind == callUnsubscribe && head.err == nil && head.next < len(head.chans) {
		head.err = fmt.Errorf("%w: unsubscribe of %d channels confirmed %d", resp.ErrProtocol, len(head.chans), head.next)
	}
	close(head.done)
	return nil
}

// failed hands an error reply to the call at the head of the queue. An
// unsubscribe keeps it until its pong (see readConfirmation).
func (c *Conn) failed(err *resp.ServerError) error {
	c.qmu.Lock()
	if len(c.queue) == 0 {
		c.qmu.Unlock()
		// Most likely the server refusing the connection (maxclients)
		// before it closes it: its error is the wire's cause.
		return fmt.Errorf("%w: error reply with no command waiting: %w", resp.ErrProtocol, err)
	}
	head := c.queue[0]
	if head.kind == callUnsubscribe {
		if head.err == nil {
			head.err = err
		}
		c.qmu.Unlock()
		return nil
	}
	c.pop()
	c.qmu.Unlock()
	head.err = err
	close(head.done)
	return nil
}

// simple handles a simple-string reply: +PONG answers a PING sent while
// the connection holds no subscription; no other command of this
// connection is answered with one.
func (c *Conn) simple(s []byte) error {
	if string(s) == "PONG" {
		return c.pong()
	}
	return fmt.Errorf("%w: reply %q does not fit the command waiting", resp.ErrProtocol, s)
}

// pop removes the head of the queue; the caller holds qmu.
func (c *Conn) pop() {
	c.queue[0] = nil
	c.queue = c.queue[1:]
	if len(c.queue) == 0 {
		c.queue = c.queue[:0:0] // let the backing array go once drained
	}
}

// is reports whether the wire key ch is the call's channel i, its prefix
// included.
func (cl *call) is(i int, ch []byte) bool {
	want := cl.chans[i]
	return len(ch) == len(cl.prefix)+len(want) &&
		string(ch[:len(cl.prefix)]) == cl.prefix && string(ch[len(cl.prefix):]) == want
}
