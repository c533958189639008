package pool

import (
	"runtime"
	"strings"
	"time"
	"unsafe"

	"github.com/cespare/xxhash/v2"
)

// A Feeder submits messages to a pool from one goroutine, a socket read
// loop, and defers waking idle workers until Flush: a burst of messages
// read from one socket then wakes each worker it feeds once, instead of
// once per message, and workers that are busy are never woken at all. A
// message queued for a sleeping worker waits until Flush, or until it
// fills half the worker's queue, so the feeding goroutine must call Flush
// before it blocks (a read loop: before every read from its socket). In a
// pool with Config.Inline, the feeding goroutine runs the handler itself for a message whose worker is idle (see SubmitCopy).
//
// A Feeder is not safe for concurrent use; each read loop has its own.
type Feeder struct {
	p       *Pool
	pending []int  // workers asleep with messages from this feeder
	marked  []bool // marked[i]: i is in pending

	// In a reusing pool, stash holds recycled buffers for SubmitCopy's
	// payloads, refilled from a worker's free list when it runs out, and
	// names the channel names it copied last, by hash.
	stash [][]byte
	names *[internSize]string

	// run is this feeder's batch runner for the messages it hands to the
	// handler itself (see SubmitCopy), made at the first; nil in a pool
	// without Config.Inline and in a one-off feeder (see
	// Pool.SubmitHeld).
	run    *batchRunner
	oneOff bool
	// arrived dates a drop of a one-off feeder's message (SubmitHeld).
	arrived time.Time
}

// internSize is the number of channel names a feeder of a reusing pool
// keeps (64 KiB of string headers), so that a channel's messages share one
// copy of its name: a two-way set-associative cache, by the top bits of
// the name's hash. On shardbench's 1,000 channels it copies a name for
// about 3% of messages (those of channels in sets of three or more); a
// direct-mapped cache of 1,024 slots did for about 40%.
const (
	internBits = 12
	internSize = 1 << internBits
)

// NewFeeder returns a feeder for p.
func (p *Pool) NewFeeder() *Feeder {
	return &Feeder{p: p, marked: make([]bool, len(p.workers))}
}

// Submit is Pool.Submit, except that a worker asleep on an empty
// queue is woken at the next Flush instead of now.
func (f *Feeder) Submit(m Message) bool {
	return f.submit(f.p.workerOf(m.Channel), m, false)
}

// SubmitCopy is Submit of a message with the given channel, payload and
// publish time, where channel and payload may be views of a read buffer:
// the message gets copies. Without Config.Reuse the two copies
// share one new allocation, the payload placed after the channel's bytes
// (so that a handler writing into the payload, which it must not do,
// could still never change the channel string). With ReusePayloads, the
// payload goes into a buffer recycled from a
// message handled before, and the channel name is shared with the
// feeder's earlier messages of that channel, so that a steady stream
// allocates nothing. An empty payload is delivered as a nil Payload.
//
// In a pool with Config.Inline, a message whose worker is asleep
// with nothing queued goes to the handler at once, on the feeding
// goroutine, before SubmitCopy returns; in a reusing pool its Payload is
// then payload itself, not a copy (it must stay intact until SubmitCopy
// returns, as a read buffer does).
func (f *Feeder) SubmitCopy(channel string, payload []byte, at time.Time) bool {
	h := xxhash.Sum64String(channel)
	i := int(h % uint64(len(f.p.workers)))
	if f.p.inline && !f.oneOff && !f.marked[i] {
		if w := &f.p.workers[i]; w.borrow() {
			// The handler may block: wake first the workers this
			// feeder queued messages for, lest they sleep through it.
			f.Flush()
			f.runOne(w, f.copied(h, channel, payload, at))
			return true
		}
	}
	if !f.p.reuse {
		return f.submit(i, f.copied(h, channel, payload, at), false)
	}
	m := Message{Channel: f.intern(h, channel), PublishedAt: at}
	if len(payload) == 0 {
		return f.submit(i, m, false)
	}
	var buf []byte
	if n := len(f.stash); n > 0 {
		buf = f.stash[n-1]
		f.stash[n-1] = nil
		f.stash = f.stash[:n-1]
	}
	m.Payload = append(buf[:0], payload...)
	if f.submit(i, m, true) {
		return true
	}
	if len(f.stash) < maxFree && cap(m.Payload) <= maxRecycled {
		f.stash = append(f.stash, m.Payload[:0]) // dropped: never handed out
	}
	return false
}

// copied returns the message SubmitCopy hands to a handler that runs
// now, before the feeder reads on: in a reusing pool, with the feeder's
// copy of the channel name and payload itself, a view of the read buffer
// that stays intact until the handler returned; otherwise with channel
// and payload copied into one new allocation.
func (f *Feeder) copied(h uint64, channel string, payload []byte, at time.Time) Message {
	if f.p.reuse {
		m := Message{Channel: f.intern(h, channel), PublishedAt: at}
		if len(payload) > 0 {
			m.Payload = payload
		}
		return m
	}
	buf := make([]byte, len(channel)+len(payload))
	copy(buf, channel)
	copy(buf[len(channel):], payload)
	m := Message{Channel: unsafe.String(unsafe.SliceData(buf), len(channel)), PublishedAt: at}
	if len(payload) > 0 {
		m.Payload = buf[len(channel):]
	}
	return m
}

// SubmitHeld is Feeder.SubmitCopy for a message submitted from any
// goroutine, not through a read loop's feeder: it wakes the message's
// worker if asleep and never runs the handler itself, whatever
// Config.Inline. arrived, when not zero, is when the message reached the
// broker, if it was held back since (an online re-layout keeps a moving
// channel's new messages until its old layout drained): a drop of it is
// told to Losses with that time, so that its window covers when the
// message came.
func (p *Pool) SubmitHeld(channel string, payload []byte, at, arrived time.Time) bool {
	f := Feeder{p: p, marked: make([]bool, len(p.workers)), oneOff: true, arrived: arrived}
	queued := f.SubmitCopy(channel, payload, at)
	f.Flush()
	return queued
}

// intern returns channel, whose hash is h, as a string of its own: the
// copy made for an earlier message of the channel, or a new one. A set
// is two slots, the name used last first.
func (f *Feeder) intern(h uint64, channel string) string {
	if f.names == nil {
		f.names = new([internSize]string)
	}
	i := h >> (64 - internBits) &^ 1
	first, second := &f.names[i], &f.names[i+1]
	switch channel {
	case *first:
	case *second:
		*first, *second = *second, *first
	default:
		*first, *second = strings.Clone(channel), *first
	}
	return *first
}

func (f *Feeder) submit(i int, m Message, owned bool) bool {
	var refill *[][]byte
	if owned && !f.oneOff {
		// A one-off feeder's stash is thrown away: the worker keeps
		// its free buffers.
		refill = &f.stash
	}
	queued, asleep, half := f.p.push(i, m, owned, refill, f.arrived)
	switch {
	case half:
		// One read's burst would fill the queue and then drop: wake the
		// worker now if it sleeps, and give it a turn. On a process
		// short of cores the read loop, which holds one, would
		// otherwise outrun a worker that is runnable but not running.
		if asleep {
			f.p.workers[i].wakeUp()
		}
		runtime.Gosched()
	case asleep && !f.marked[i]:
		f.marked[i] = true
		f.pending = append(f.pending, i)
	}
	return queued
}

// Flush wakes the workers that were asleep when this feeder queued
// messages for them.
func (f *Feeder) Flush() {
	for _, i := range f.pending {
		f.marked[i] = false
		f.p.workers[i].wakeUp()
	}
	f.pending = f.pending[:0]
}

// runOne hands m to the handler on the feeding goroutine, for w, which
// the feeder borrowed, and gives w back, also when the handler ends the
// goroutine (runtime.Goexit: a test's FailNow).
func (f *Feeder) runOne(w *worker, m Message) {
	defer w.giveBack()
	r := f.runner()
	r.b.msgs[0], r.b.owned[0] = m, false
	f.p.run(w, r, 1)
}

// runner returns the feeder's batch runner, made at its first use.
func (f *Feeder) runner() *batchRunner {
	if f.run == nil {
		f.run = new(batchRunner)
	}
	return f.run
}

// borrow lets a feeder run a message of w on its own goroutine, as if w
// ran it: it succeeds if w is asleep (its goroutine blocked on w.wake)
// with nothing queued and is not closing. It then clears w.sleeping,
// which keeps everyone else from waking w until giveBack (a submitter
// wakes a worker only if it saw it asleep, and Close wakes it through
// wakeUp, which does the same); messages queued for w meanwhile wait, so
// w's messages are still handled one at a time and in order.
func (w *worker) borrow() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.sleeping || w.closed || w.n > 0 {
		return false
	}
	w.sleeping = false
	return true
}

// giveBack ends a borrow: w sleeps on, or is woken when messages were
// queued meanwhile or the pool is closing.
func (w *worker) giveBack() {
	w.mu.Lock()
	wake := w.n > 0 || w.closed
	w.sleeping = !wake
	w.mu.Unlock()
	if wake {
		w.wake <- struct{}{} // never blocks: nobody else sends while it is not sleeping
	}
}
