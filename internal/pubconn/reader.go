package pubconn

import (
	"bufio"
	"fmt"
	"runtime"
	"strconv"

	"github.com/shardcast/shardcast/internal/resp"
)

// read matches replies to queued calls until the wire fails, then fails
// every call still queued and forgets the wire so the next Publish dials.
func (p *Pub) read(w *wire) {
	defer p.wires.Done()
	br := bufio.NewReaderSize(w.nc, 16<<10)
	rd := resp.NewReader(br)
	var err error
	woke := false // a call of PublishAsync was completed since the last write check
	var run replyRun
	for {
		if n := run.take(p, w, br); n > 0 {
			woke = woke || run.woke
			if br.Buffered() == 0 {
				p.writeBetweenReplies(w, woke)
				woke = false
			}
			continue
		}
		var line []byte
		var value any
		var res error
		if line, value, res, err = nextReply(rd); err != nil {
			break
		}
		var c *call
		if c, err = w.pop(res); err != nil {
			break
		}
		switch {
		case !c.want && line == nil:
			res = fmt.Errorf("%w: a multi-line reply to a publish", resp.ErrProtocol)
		case c.want && line != nil && res == nil:
			value, res = lineValue(line)
		}
		if c.fn != nil {
			woke = true
		}
		p.complete(c, value, res)
		if br.Buffered() == 0 {
			p.writeBetweenReplies(w, woke)
			woke = false
		}
	}
	p.fail(w, err)
}

// replyRun is the reader's fast path for what it mostly reads: a run of
// integer replies (to PUBLISH and SPUBLISH) that the buffer holds whole,
// matched to their calls under one lock of the wire instead of one each,
// and parsed in one pass over the buffer instead of a search per line.
type replyRun struct {
	ends  [64]int   // where each reply of the run ends in the buffer
	calls [64]*call // the calls they answer
	woke  bool      // the last take completed a call of PublishAsync
}

// take completes the calls answered by the integer replies at the front
// of br's buffer, without reading from the socket, and returns how many
// it completed: 0 when the buffer does not start with a whole integer
// reply, or no call waits (read's reply-by-reply path then takes over,
// and reports a reply nobody waits for).
func (r *replyRun) take(p *Pub, w *wire, br *bufio.Reader) int {
	buf, _ := br.Peek(br.Buffered()) // never reads: at most Buffered
	k := intReplies(buf, r.ends[:])
	if k == 0 {
		return 0
	}
	k = w.popRun(r.calls[:k])
	r.woke = false
	start := 0
	for i, c := range r.calls[:k] {
		r.calls[i] = nil
		var value any
		var res error
		if c.want {
			value, res = lineValue(buf[start : r.ends[i]-2])
		}
		if c.fn != nil {
			r.woke = true
		}
		p.complete(c, value, res)
		start = r.ends[i]
	}
	_, _ = br.Discard(start)
	return k
}

// intReplies finds the whole integer replies (":<digits>\r\n", at
// most 20 characters with the sign) at the front of buf, at most
// len(ends), records where each ends and returns how many it found.
func intReplies(buf []byte, ends []int) int {
	n, off := 0, 0
	for n < len(ends) && off < len(buf) && buf[off] == ':' {
		j := off + 1
		if j < len(buf) && buf[j] == '-' {
			j++
		}
		for j < len(buf) && j-off <= 20 && buf[j] >= '0' && buf[j] <= '9' {
			j++
		}
		if j+1 >= len(buf) || buf[j] != '\r' || buf[j+1] != '\n' || buf[j-1] < '0' || buf[j-1] > '9' {
			break
		}
		off = j + 2
		ends[n] = off
		n++
	}
	return n
}

// popRun takes the oldest queued calls, at most len(calls), whose replies
// have just been read, and returns how many it took.
func (w *wire) popRun(calls []*call) int {
	w.mu.Lock()
	n := copy(calls, w.queue[w.head:])
	clear(w.queue[w.head : w.head+n])
	w.head += n
	if w.head == len(w.queue) {
		w.queue, w.head = w.queue[:0], 0
	}
	w.mu.Unlock()
	return n
}

// nextReply reads one reply: a publish is answered on one line (returned
// in line, with res holding a server error), a command of Do may get a
// bulk string or an array, decoded whole into value. err means the wire
// is broken.
func nextReply(rd *resp.Reader) (line []byte, value any, res, err error) {
	kind, err := rd.Peek()
	if err != nil {
		return nil, nil, nil, err
	}
	if kind == '$' || kind == '*' {
		value, err = rd.Reply()
		return nil, value, nil, err
	}
	if line, err = rd.Line(); err != nil {
		return nil, nil, nil, err
	}
	switch line[0] {
	case ':', '+':
	case '-':
		res = &resp.ServerError{Msg: string(line[1:])}
	default:
		err = fmt.Errorf("%w: unexpected reply %q", resp.ErrProtocol, line)
	}
	return line, nil, res, err
}

// pop takes the oldest queued call, whose reply has just been read. A
// reply with no call waiting breaks the wire; res, a server error before
// any command (maxclients), becomes the wire's cause.
func (w *wire) pop(res error) (*call, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.head == len(w.queue) {
		if res != nil && w.werr == nil {
			w.werr = res
		}
		return nil, fmt.Errorf("%w: reply with no command waiting", resp.ErrProtocol)
	}
	c := w.queue[w.head]
	w.queue[w.head] = nil
	w.head++
	if w.head == len(w.queue) {
		w.queue, w.head = w.queue[:0], 0
	}
	return c, nil
}

// writeBetweenReplies runs when the replies read so far are handled, before
// read waits for more: it writes what calls of PublishAsync left for this
// moment (see send). When done funcs ran (woke), they may have let callers
// go on to more calls: it claims the write and yields once, so that those
// calls join it rather than each write on its own.
func (p *Pub) writeBetweenReplies(w *wire, woke bool) {
	w.mu.Lock()
	if w.writing || w.err != nil || (!woke && len(w.buf) == 0) {
		w.mu.Unlock()
		return
	}
	if woke {
		w.writing = true
		w.mu.Unlock()
		runtime.Gosched()
		w.mu.Lock()
	}
	w.flush(p.t.Write) // unlocks w.mu
}

// fail ends wire w after its reader stopped on err: it forgets the wire,
// and fails every call still queued, as not sent for those no write
// carried.
func (p *Pub) fail(w *wire, err error) {
	_ = w.nc.Close()
	p.mu.Lock()
	if p.w == w {
		p.w = nil
		p.cur.Store(nil)
	}
	closed := p.closed
	p.mu.Unlock()
	w.mu.Lock()
	switch {
	case closed:
		err = ErrClosed
	case w.werr != nil:
		err = fmt.Errorf("pubconn: connection to %s dropped: %w", p.dial.Addr, w.werr)
	default:
		err = fmt.Errorf("pubconn: connection to %s lost: %w", p.dial.Addr, err)
	}
	w.err = err
	queue := w.queue[w.head:]
	unsent := int(w.queued - w.sent) // the tail of the queue never reached a write
	w.queue, w.head, w.buf = nil, 0, nil
	if w.watch != nil {
		w.watch.Stop()
		w.armed = false
	}
	w.mu.Unlock()
	var notSentErr error = &notSent{err}
	for i, c := range queue {
		if i >= len(queue)-unsent {
			p.complete(c, nil, notSentErr)
		} else {
			p.complete(c, nil, err)
		}
	}
}

// lineValue decodes a one-line reply (an integer or a simple string) for a
// call of Do.
func lineValue(line []byte) (any, error) {
	if line[0] == '+' {
		return string(line[1:]), nil
	}
	n, err := strconv.ParseInt(string(line[1:]), 10, 64)
	if err != nil {
		return nil, fmt.Errorf("%w: bad integer %q", resp.ErrProtocol, line)
	}
	return n, nil
}
