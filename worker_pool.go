package shardcast

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
)

const (
	// lossReportInterval is the shortest time between two loss events of
	// one kind: an overload drops messages by the thousand, and one event
	// per drop would bury the application in reports.
	lossReportInterval = 100 * time.Millisecond
	// maxReportedChannels caps Event.Channels for aggregated loss events so
	// an overload across millions of channels cannot grow one event without
	// bound.
	maxReportedChannels = 1000
)

// WorkerPool runs the Handler on a fixed set of worker goroutines, each fed
// by its own bounded queue. A message goes to worker hash(channel) mod N, so
// the messages of one channel are handled in the order they were submitted
// and never concurrently, while different channels spread over workers.
//
// Submit never blocks: it is called from socket read loops, and a read loop
// that waits for a slow handler makes Redis buffer for it until Redis drops
// the whole connection. A full queue drops the message instead; drops are
// counted and reported as aggregated EventDropped events (see Submit).
// (A pool built for Options.InlineHandling trades this for a saved
// hand-off: a read loop's feeder may run a fast handler itself for a
// message whose worker is idle; see feeder.SubmitCopy.)
//
// A panic in the Handler is recovered: the message counts as a panic (not
// as delivered), the worker goes on with its next message, and the panic is
// reported like drops are, as an aggregated EventError (Count panics,
// distinct Channels, Since..Until) whose Err wraps ErrHandlerPanic and
// carries the first panic's value and stack. Killing the worker would stall
// every channel routed to it; killing the process would take down every
// subscription of the node.
type WorkerPool struct {
	handler        Handler
	emit           func(Event)
	workers        []poolWorker
	reportInterval time.Duration
	// reuse: the buffers of SubmitCopy's payloads are recycled once
	// handled (Options.ReusePayloads).
	reuse bool
	// inline: a feeder hands a message whose worker is idle to the
	// handler itself (see feeder.SubmitCopy and Options.InlineHandling).
	inline bool

	drops  lossWindow
	panics lossWindow

	// kick wakes the reporter when a loss window opens; one pending signal
	// is enough because the reporter reads both windows on every wake.
	kick         chan struct{}
	stop         chan struct{}
	reporterDone chan struct{}
	workersDone  sync.WaitGroup
	closeOnce    sync.Once
}

// poolWorker is one worker's queue and counters. The queue is a ring
// guarded by mu: the worker takes up to takeBatch messages per lock, and a
// submitter wakes it only when it found the worker asleep on an empty
// queue, so a busy worker costs its submitters no wake-up at all. The
// padding keeps the fields written by submitters and those written by the
// worker goroutine on different cache lines.
type poolWorker struct {
	mu       sync.Mutex
	closed   bool
	sleeping bool // the worker waits on wake; the next submitter sends
	ring     []Message
	head, n  int           // ring[head], … the n queued messages, wrapping
	wake     chan struct{} // capacity 1
	dropped  atomic.Uint64
	// In a reusing pool, owned[j] tells that ring[j]'s Payload is a
	// buffer of the pool's own (queued by SubmitCopy), recycled once
	// handled, and free holds the recycled buffers until a feeder takes
	// them (see feeder.SubmitCopy); nil otherwise.
	owned []bool
	free  [][]byte
	_     [64]byte

	// delivered, lag and handling are written by the worker goroutine
	// only (see histogram.recordOwned).
	delivered atomic.Uint64
	panics    atomic.Uint64
	// held is how many messages of the batch the worker took are still
	// waiting for the handler (the one in it not counted), as of the
	// worker's last publish of its counters (see work): QueueDepth counts
	// them as queued. Only the worker writes it.
	held atomic.Int64
	// highWater is the deepest the backlog was when the worker took from
	// its queue or when a stats call looked (see observe). Submit does not
	// measure it, so that it stays as cheap as it was.
	highWater atomic.Int64
	lag       histogram
	handling  histogram
	_         [64]byte
}

// takeBatch is the most messages a worker takes from its queue at once.
// It bounds the worker's private copy (takeBatch Messages on its stack);
// QueueDepth still counts the ones taken and not handled yet.
const takeBatch = 64

// NewWorkerPool starts the pool an engine with Options o runs: o.Workers
// workers (DefaultWorkers if zero), each with a queue of o.QueueSize
// messages (DefaultQueueSize if zero) plus the batch of up to 64 it has
// taken and not handled yet, passing messages to o.Handler (nil discards
// them), and one reporter goroutine passing loss events to emit (nil
// discards them). o.ReusePayloads recycles the payload buffers the pool
// copies once their handler returned; o.InlineHandling lets a read loop
// run an idle worker's message itself.
//
// emit is called from the reporter goroutine only, never from Submit, and
// never after Close returns; it should not block. The caller owns the
// pool and must Close it to stop its goroutines.
func NewWorkerPool(o Options, emit func(Event)) *WorkerPool {
	return newWorkerPool(o.Workers, o.QueueSize, o.Handler, emit, lossReportInterval, o.ReusePayloads, o.InlineHandling)
}

// newWorkerPool is NewWorkerPool with a chosen report interval, so tests
// can pin down aggregation without depending on the scheduler's timing.
func newWorkerPool(workers, queueSize int, handler Handler, emit func(Event), reportInterval time.Duration, reuse, inline bool) *WorkerPool {
	if workers <= 0 {
		workers = DefaultWorkers
	}
	if queueSize <= 0 {
		queueSize = DefaultQueueSize
	}
	if handler == nil {
		handler = func(Message) {}
	}
	if emit == nil {
		emit = func(Event) {}
	}
	p := &WorkerPool{
		handler:        handler,
		emit:           emit,
		workers:        make([]poolWorker, workers),
		reportInterval: reportInterval,
		reuse:          reuse,
		inline:         inline,
		kick:           make(chan struct{}, 1),
		stop:           make(chan struct{}),
		reporterDone:   make(chan struct{}),
	}
	p.workersDone.Add(workers)
	for i := range p.workers {
		w := &p.workers[i]
		w.ring = make([]Message, queueSize)
		if reuse {
			w.owned = make([]bool, queueSize)
		}
		w.wake = make(chan struct{}, 1)
		go p.work(w)
	}
	go p.report()
	return p
}

// Submit queues m for its channel's worker and reports whether it was
// queued. It never blocks and allocates nothing.
//
// When the worker's queue is full, m is dropped: the drop is counted (see
// Dropped) and its channel recorded. The first drop opens a report window;
// while drops continue, one EventDropped covering the window (Count, the
// distinct Channels up to 1000 with Truncated beyond, Since = first drop
// or, earlier, the arrival of a held message dropped (SubmitHeld), Until =
// report time) is emitted about every 100 ms, one more follows the
// last drop, and Close emits whatever is still unreported.
//
// After Close, Submit returns false without queueing or counting m: the
// pool is gone, not overloaded.
func (p *WorkerPool) Submit(m Message) bool {
	i := p.workerOf(m.Channel)
	queued, asleep, _ := p.push(i, m, false, nil, time.Time{})
	if asleep {
		p.workers[i].wakeUp()
	}
	return queued
}

// workerOf returns the index of the worker that handles channel.
func (p *WorkerPool) workerOf(channel string) int {
	return int(xxhash.Sum64String(channel) % uint64(len(p.workers)))
}

// push queues m for worker i, or counts it as dropped when that queue is
// full, and reports whether m was queued, whether the worker is asleep
// and must be woken for it, and whether it is asleep with its queue at
// least half full, to be woken without waiting for a feeder's Flush. owned
// marks m's Payload as the pool's own buffer (Options.ReusePayloads). With refill, a feeder's stash of
// buffers, and m queued, push moves the worker's free buffers into the
// stash if it runs low, under the lock it takes anyway: every worker a
// feeder feeds hands back its buffers that way, so none piles up buffers
// to its cap (and drops them) while the feeder allocates new ones.
// arrived, when not zero, dates a drop of m (see SubmitHeld).
func (p *WorkerPool) push(i int, m Message, owned bool, refill *[][]byte, arrived time.Time) (queued, asleep, filling bool) {
	w := &p.workers[i]
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return false, false, false
	}
	if w.n == len(w.ring) {
		// Counted under mu: once Close has set closed, the reporter's
		// last report includes every drop Dropped counts.
		w.dropped.Add(1)
		report := p.drops.add(m.Channel, arrived, nil)
		w.mu.Unlock()
		if report {
			p.wakeReporter()
		}
		return false, false, false
	}
	at := w.head + w.n
	if at >= len(w.ring) {
		at -= len(w.ring)
	}
	w.ring[at] = m
	if w.owned != nil {
		w.owned[at] = owned
	}
	w.n++
	asleep = w.sleeping
	filling = asleep && 2*w.n >= len(w.ring)
	if refill != nil && len(*refill) < refillBelow && len(w.free) > 0 {
		n := min(len(w.free), maxFree-len(*refill))
		rest := len(w.free) - n
		*refill = append(*refill, w.free[rest:]...)
		clear(w.free[rest:])
		w.free = w.free[:rest]
	}
	w.mu.Unlock()
	return true, asleep, filling
}

// Close stops accepting messages, lets every worker handle the messages
// already in its queue (it drains rather than discards: a message Submit
// accepted is handed to the handler), waits for the workers to exit, emits
// the loss events not yet reported, and waits for the reporter to exit.
// A handler that never returns therefore keeps Close from returning.
//
// Close is safe to call more than once and from several goroutines; every
// call returns once the pool has stopped. It must not be called from the
// handler, which it would wait for.
func (p *WorkerPool) Close() {
	p.closeOnce.Do(func() {
		for i := range p.workers {
			w := &p.workers[i]
			w.mu.Lock()
			w.closed = true
			w.mu.Unlock()
			w.wakeUp()
		}
		p.workersDone.Wait()
		close(p.stop)
		<-p.reporterDone
	})
}
