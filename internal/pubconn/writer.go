package pubconn

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"time"
)

func (p *Pub) do(ctx context.Context, cmd command) (any, error) {
	c, err := p.send(ctx, cmd, nil)
	if err != nil {
		return nil, err
	}
	if done := ctx.Done(); done == nil {
		<-c.done // a plain receive costs less than a select
	} else {
		select {
		case <-c.done:
		case <-done:
			// The reply may still come: c stays with the wire, not the pool.
			return nil, ctx.Err()
		}
	}
	err, value := c.err, c.value
	c.err, c.value = nil, nil
	calls.Put(c)
	if err == nil && cmd.publishes() {
		p.published.Add(1)
	}
	return value, err
}

// send queues cmd on the live wire (dialling one if needed, bounded by
// ctx) and starts a write unless one is in progress. Without fn it
// returns the call whose done channel the reply will signal; with fn the
// call belongs to the wire, which passes the outcome to fn, and send
// returns nil. An error means nothing was queued, and wraps ErrNotSent.
func (p *Pub) send(ctx context.Context, cmd command, fn func(error)) (*call, error) {
	w, waited, err := p.wire(ctx)
	if err != nil {
		return nil, &notSent{err}
	}
	if cmd.runID {
		if err := p.learnRunID(ctx, w); err != nil {
			return nil, &notSent{err}
		}
	}
	return p.queue(ctx, w, cmd, fn, waited)
}

// queue is send on wire w: waited tells that getting w took a dial.
func (p *Pub) queue(ctx context.Context, w *wire, cmd command, fn func(error), waited bool) (*call, error) {
	c := calls.Get().(*call)
	c.fn = fn
	c.want = cmd.replied()
	c.at = cmd.now
	if c.at.IsZero() || waited || cmd.again {
		// A dial, or a resend's backoffs, may have taken longer than the
		// silence limit.
		c.at = time.Now()
	}
	w.mu.Lock()
	if w.err != nil || len(w.buf) >= MaxBacklog {
		err := w.err
		if err == nil {
			err = ErrBacklog
		}
		w.mu.Unlock()
		c.fn = nil
		calls.Put(c)
		return nil, &notSent{err}
	}
	if cmd.asking {
		// ASKING's reply goes to a call nobody waits for (done is
		// buffered); at dates it for the watchdog.
		w.buf = append(w.buf, "*1\r\n$6\r\nASKING\r\n"...)
		w.enqueue(&call{done: make(chan struct{}, 1), at: c.at})
	}
	w.buf = cmd.append(w.buf, w.runID)
	w.enqueue(c)
	if fn != nil {
		// The reader may complete c, and the pool hand it out again,
		// as soon as w.mu is released.
		c = nil
	}
	if p.t.Reply > 0 && !w.armed {
		w.armed = true
		first := p.t.Reply
		if w.stall > 0 {
			first = min(first, w.stall)
		}
		if w.watch == nil {
			timeout := p.t.Reply
			w.watch = time.AfterFunc(first, func() { w.watchdog(timeout) })
		} else {
			w.watch.Reset(first)
		}
	}
	switch {
	case w.writing:
		w.mu.Unlock() // the write in progress takes it
	case fn != nil && w.sent > w.answered() && len(w.buf) < asyncWriteBytes:
		// A call of PublishAsync while written commands await replies
		// leaves the write to the reader, which makes it once it has
		// handled the replies it holds: the calls made meanwhile go out
		// in one write, as redis-benchmark -P does, instead of a write
		// each. The reader will come: a reply is due, or the wire fails.
		w.mu.Unlock()
	case fn != nil:
		// A call of PublishAsync with nothing in flight: claim the write
		// and yield once before making it, so that calls other goroutines
		// are about to make (the waiters a reader just woke, the handlers
		// of requests that arrived together) join it instead of each
		// making a write of its own. The write waits one turn of the
		// scheduler; a busy process saves a write syscall (and a wake-up
		// of the server) per call that joins, an idle one loses nothing.
		w.writing = true
		w.mu.Unlock()
		runtime.Gosched()
		w.mu.Lock()
		w.flush(p.t.Write) // unlocks w.mu
	default:
		w.flush(p.t.Write) // unlocks w.mu
	}
	return c, nil
}

// asyncWriteBytes is how many queued bytes make a call of PublishAsync
// write them itself rather than leave them for the reader.
const asyncWriteBytes = 64 << 10

// answered returns how many calls of w had their replies matched (or
// failed). The caller holds w.mu.
func (w *wire) answered() uint64 {
	return w.queued - uint64(len(w.queue)-w.head)
}

// complete hands a call its outcome: a waiting caller is woken; a call of
// PublishAsync goes back to the pool and its fn runs, here, on the
// reader's goroutine.
func (p *Pub) complete(c *call, value any, err error) {
	if fn := c.fn; fn != nil {
		c.fn, c.at = nil, time.Time{}
		calls.Put(c)
		if err == nil {
			p.published.Add(1)
		}
		fn(err)
		return
	}
	c.value, c.err = value, err
	c.done <- struct{}{}
}

// enqueue appends c to the calls waiting for replies. The caller holds
// w.mu and has appended c's command to w.buf.
func (w *wire) enqueue(c *call) {
	if w.head > 0 && len(w.queue) == cap(w.queue) {
		n := copy(w.queue, w.queue[w.head:])
		clear(w.queue[n:])
		w.queue, w.head = w.queue[:n], 0
	}
	w.queue = append(w.queue, c)
	w.queued++
}

// watchdog runs from w.watch, armed while commands wait for replies. It
// closes the wire when the oldest unanswered command has waited longer
// than timeout: the server froze or the path went silent without closing
// the socket, and no reply is coming. Every call waiting on the wire then
// fails, and the next Publish dials afresh. Otherwise it re-arms for when
// the oldest would be late, or disarms when nothing waits; so it fires at
// most once per timeout, whatever the publish rate. With a stall hook
// (see SetOnStall) it also looks every Stall, and reports each command
// that, as the oldest, has waited longer than Stall, once.
func (w *wire) watchdog(timeout time.Duration) {
	w.mu.Lock()
	if w.err != nil || w.head >= len(w.queue) {
		w.armed = false
		w.mu.Unlock()
		return
	}
	age := time.Since(w.queue[w.head].at)
	var report func()
	headSeq := w.queued - uint64(len(w.queue)-w.head) + 1 // 1 + the head's number
	stalled := w.stall > 0 && age > w.stall
	if stalled && w.stalledOn != headSeq {
		w.stalledOn, report = headSeq, w.onStall
	}
	if age <= timeout {
		next := timeout - age
		switch {
		case w.stall <= 0:
		case !stalled:
			next = min(next, w.stall-age) // when the oldest would stall
		default:
			// Look again within a Stall, to see the next command stall
			// even while commands keep the queue busy.
			next = min(next, w.stall)
		}
		w.watch.Reset(next + time.Millisecond)
		w.mu.Unlock()
		if report != nil {
			report() // outside the lock: it must not block
		}
		return
	}
	if w.werr == nil {
		w.werr = fmt.Errorf("no reply for %v: %w", timeout, os.ErrDeadlineExceeded)
	}
	w.armed = false
	w.mu.Unlock()
	if report != nil {
		report()
	}
	_ = w.nc.Close()
}

// flush writes w.buf until nothing is left, then clears w.writing. The
// caller holds w.mu and set nothing yet; flush returns with w.mu unlocked.
func (w *wire) flush(timeout time.Duration) {
	w.writing = true
	for len(w.buf) > 0 && w.err == nil {
		if len(w.queue)-w.head > 1 {
			// Others are in flight: their replies are waking publishers
			// that will have commands for this write if given a moment.
			w.mu.Unlock()
			runtime.Gosched()
			w.mu.Lock()
		}
		out, batch := w.buf, w.queued
		w.buf, w.spare = w.spare[:0], nil
		// The reader may fail the wire while the write runs: whatever it
		// carries may have reached Redis, so none of it is "not sent".
		w.prevSent, w.sent = w.sent, batch
		w.mu.Unlock()
		err := w.armWrite(timeout)
		n := 0
		if err == nil {
			n, err = w.nc.Write(out)
		}
		w.mu.Lock()
		if n == 0 {
			w.sent = w.prevSent // none left: not sent after all
		} // else a partial write may have carried any of them
		if cap(out) <= 1<<20 {
			w.spare = out[:0]
		}
		if err != nil {
			// A partial write leaves the stream unusable: the reader
			// fails every queued call once the socket is closed, with
			// this error as the cause (set before the close it causes).
			if w.werr == nil {
				w.werr = err
			}
			_ = w.nc.Close()
			break
		}
	}
	w.writing = false
	w.mu.Unlock()
}

// armWrite makes sure the next write has at least timeout (none when
// zero) before its deadline, and no more than half as much again. Setting
// a deadline costs about a third of a small write (a runtime timer under
// the poller's lock), so one deadline serves every write that starts
// within its first half. The caller holds w.writing.
func (w *wire) armWrite(timeout time.Duration) error {
	if timeout <= 0 {
		return nil
	}
	now := time.Now()
	if w.deadline.Sub(now) >= timeout {
		return nil
	}
	w.deadline = now.Add(timeout + timeout/2)
	return w.nc.SetWriteDeadline(w.deadline)
}
