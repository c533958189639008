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
	for {
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
