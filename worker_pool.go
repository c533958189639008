package shardcast

import (
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardcast/shardcast/internal/observe"

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
	// handled (see NewReusingWorkerPool).
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
// distinct Channels up to 1000 with Truncated beyond, Since = first drop,
// Until = report time) is emitted about every 100 ms, one more follows the
// last drop, and Close emits whatever is still unreported.
//
// After Close, Submit returns false without queueing or counting m: the
// pool is gone, not overloaded.
func (p *WorkerPool) Submit(m Message) bool {
	i := p.workerOf(m.Channel)
	queued, asleep, _ := p.push(i, m, false, nil)
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
// marks m's Payload as the pool's own buffer (see NewReusingWorkerPool). With refill, a feeder's stash of
// buffers, and m queued, push moves the worker's free buffers into the
// stash if it runs low, under the lock it takes anyway: every worker a
// feeder feeds hands back its buffers that way, so none piles up buffers
// to its cap (and drops them) while the feeder allocates new ones.
func (p *WorkerPool) push(i int, m Message, owned bool, refill *[][]byte) (queued, asleep, filling bool) {
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
		report := p.drops.add(m.Channel, nil)
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

// wakeUp wakes the worker if it is still asleep: of several submitters
// that saw it asleep, only the first sends.
func (w *poolWorker) wakeUp() {
	w.mu.Lock()
	asleep := w.sleeping
	w.sleeping = false
	w.mu.Unlock()
	if asleep {
		w.wake <- struct{}{} // never blocks: one send per sleep, capacity 1
	}
}

// workerBatch is what a worker has taken from its queue: the messages,
// which of their payloads are the pool's to recycle, and the recycled
// payloads of the messages handled since its last take.
type workerBatch struct {
	msgs   [takeBatch]Message
	owned  [takeBatch]bool
	spent  [takeBatch][]byte
	nspent int
}

// Bounds on the buffers a reusing pool keeps for later messages, so that
// a burst, or a few huge payloads, do not hold memory for good: each
// worker's free list and each feeder's stash keep at most maxFree buffers
// of at most maxRecycled bytes.
const (
	maxFree     = 256
	maxRecycled = 16 << 10
	// refillBelow is the stash size below which a feeder takes a
	// worker's free buffers.
	refillBelow = 32
)

// take hands the payloads b.spent to w's free list, then moves up to
// takeBatch queued messages into b, sleeping while the queue is empty,
// and returns how many it moved and whether it slept; n is 0 once the pool
// is closed and the queue drained.
func (w *poolWorker) take(b *workerBatch) (n int, slept bool) {
	w.mu.Lock()
	for _, buf := range b.spent[:b.nspent] {
		if len(w.free) < maxFree && cap(buf) <= maxRecycled {
			w.free = append(w.free, buf[:0])
		}
	}
	clear(b.spent[:b.nspent])
	b.nspent = 0
	for w.n == 0 {
		if w.closed {
			w.mu.Unlock()
			return 0, slept
		}
		w.sleeping = true
		w.mu.Unlock()
		<-w.wake
		slept = true
		w.mu.Lock()
	}
	depth := int64(w.n)
	n = min(w.n, len(b.msgs))
	first := copy(b.msgs[:n], w.ring[w.head:])
	copy(b.msgs[first:n], w.ring)
	if w.owned != nil {
		copy(b.owned[:n], w.owned[w.head:])
		copy(b.owned[first:n], w.owned)
	}
	// Clear the slots so the ring does not keep handled payloads alive.
	clear(w.ring[w.head:min(w.head+n, len(w.ring))])
	clear(w.ring[:n-first])
	w.head += n
	if w.head >= len(w.ring) {
		w.head -= len(w.ring)
	}
	w.n -= n
	// Under mu, so that queued always counts them; the first is about to
	// go to the handler.
	w.held.Store(int64(n - 1))
	w.mu.Unlock()
	w.raise(depth)
	return n, slept
}

// queued returns the number of messages waiting for w's handler now: in
// its queue, and taken in its current batch but not handed over yet.
func (w *poolWorker) queued() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n + int(w.held.Load())
}

// Dropped returns the number of messages Submit dropped because a queue was
// full, since the pool started.
func (p *WorkerPool) Dropped() uint64 {
	var n uint64
	for i := range p.workers {
		n += p.workers[i].dropped.Load()
	}
	return n
}

// Delivered returns the number of messages the handler returned from
// normally, since the pool started. A worker publishes its count when it
// finishes a batch and at most every 8 calls before, so the count may
// trail by the calls since.
func (p *WorkerPool) Delivered() uint64 {
	var n uint64
	for i := range p.workers {
		n += p.workers[i].delivered.Load()
	}
	return n
}

// Panics returns the number of handler calls that panicked, since the pool
// started.
func (p *WorkerPool) Panics() uint64 {
	var n uint64
	for i := range p.workers {
		n += p.workers[i].panics.Load()
	}
	return n
}

// QueueDepth returns the number of messages waiting in the worker queues
// now, summed over workers. A worker busy with fast calls updates the
// count of the messages it has taken every few calls (see Delivered), so
// it may still count up to 7 it has handed to the handler.
func (p *WorkerPool) QueueDepth() int {
	n := 0
	for i := range p.workers {
		n += int(p.workers[i].observe())
	}
	return n
}

// QueueHighWater returns the deepest any one worker's backlog has been
// since the pool started, as measured when the worker took from its queue
// or when QueueDepth or QueueHighWater was read: the messages queued and
// those taken but not handed to the handler yet. The pool drops once a
// queue reaches the queue size. It is a per-worker figure, not a sum,
// because it is one queue filling up that loses messages.
func (p *WorkerPool) QueueHighWater() int {
	var hw int64
	for i := range p.workers {
		w := &p.workers[i]
		w.observe()
		hw = max(hw, w.highWater.Load())
	}
	return int(hw)
}

// observe returns w's backlog now and raises its high-water mark to it: a
// worker stuck in its handler has not measured the backlog behind it, and
// a batch it took no longer shows in its queue's length at the next take,
// so a peak seen here is kept.
func (w *poolWorker) observe() int64 {
	now := int64(w.queued())
	w.raise(now)
	return now
}

// raise lifts w's high-water mark to v if v is higher.
func (w *poolWorker) raise(v int64) {
	for {
		hw := w.highWater.Load()
		if v <= hw || w.highWater.CompareAndSwap(hw, v) {
			return
		}
	}
}

// Latency returns the pool's lag and handler-duration histograms since it
// started, merged over workers (each records into its own, so workers do
// not contend). It allocates the snapshots; call it at a metrics scrape,
// not per message.
func (p *WorkerPool) Latency() LatencyStats {
	var ls LatencyStats
	for i := range p.workers {
		w := &p.workers[i]
		ls.Lag.addFrom(&w.lag)
		ls.HandlerTime.addFrom(&w.handling)
	}
	return ls
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

// work runs w's messages through the handler and records the lag of each
// message that has a PublishedAt and the duration of sampled handler
// calls. It reads the monotonic clock once per batch it takes, after
// every timed call, and after every lagEvery-th untimed one. Timed are the
// first call of a batch, the call after each read, and, once a timed call
// took exactDuration or longer (a clock read is then a few percent of a
// call at most), every later call of the batch. A lag is therefore short
// by at most the durations of the lagEvery-1 calls before it, and exact
// while handlers are slow.
//
// The worker's counters are atomics that stats calls read concurrently,
// and on amd64 every atomic store is a locked instruction that costs more
// than the rest of recording a lag; so the worker publishes them where it
// reads the clock before a timed call, and at the end of each batch,
// rather than per call: delivered and the lags gathered since (lags
// first, so that a reader who sees a delivery sees its lag), and held.
// Between two such points, at most lagEvery calls apart, Delivered and
// the lag histogram trail by the calls since, and QueueDepth still counts
// the messages handed over since.
func (p *WorkerPool) work(w *poolWorker) {
	defer p.workersDone.Done()
	var r batchRunner
	for {
		n, _ := w.take(&r.b)
		if n == 0 {
			return
		}
		p.run(w, &r, n)
	}
}

// batchRunner is what running a worker's batches takes besides the
// worker: the batch, and the clock and lag tally of the goroutine running
// it (the worker's own, or that of a feeder, which hands an idle worker's
// messages to the handler one at a time; see feeder.SubmitCopy).
type batchRunner struct {
	clock workerClock
	lags  histTally
	b     workerBatch
}

// run hands the n messages of r's batch, taken from w's queue, to the
// handler, as work describes. Only the goroutine that took them from w
// may run them, and only one batch of w runs at a time: run writes w's
// counters and histograms as their only writer.
func (p *WorkerPool) run(w *poolWorker, r *batchRunner, n int) {
	b := &r.b
	// now is the clock at the start of the next call when fresh,
	// and at most stale calls before it otherwise. done counts the
	// calls that returned since delivered was last published.
	var now time.Duration
	if observe.Deliveries {
		now = r.clock.read()
	}
	fresh, stale, exact, done := true, 0, false, uint64(0)
	held := n - 1 // as take stored it
	for i := range n {
		m := b.msgs[i]
		b.msgs[i] = Message{}
		if observe.Deliveries && !m.PublishedAt.IsZero() {
			r.lags.record(&w.lag, r.clock.lag(now, m.PublishedAt))
		}
		returned := p.handle(w, m)
		if returned {
			done++
		}
		if b.owned[i] {
			b.spent[b.nspent] = m.Payload
			b.nspent++
		}
		if fresh {
			var end time.Duration
			if observe.Deliveries {
				end = r.clock.since()
				if returned {
					d := end - now
					w.handling.recordOwned(d)
					exact = exact || d >= exactDuration
				}
			}
			// A panicking call went untimed: time the next one.
			now, fresh, stale = end, exact || !returned, 0
		} else if stale++; stale == lagEvery-1 {
			if observe.Deliveries {
				now = r.clock.since()
			}
			fresh, stale = true, 0
		}
		if fresh || i == n-1 {
			r.lags.flush(&w.lag)
			w.delivered.Store(w.delivered.Load() + done) // only this batch's runner writes it
			done = 0
			// The next call's message is no longer held.
			if next := max(n-i-2, 0); next != held {
				w.held.Store(int64(next))
				held = next
			}
		}
	}
}

const (
	// exactDuration is the handler duration from which a worker times
	// every call of a batch (see work).
	exactDuration = 2 * time.Microsecond
	// lagEvery bounds how many fast calls share one clock reading, and
	// how many calls the worker's published counters may lag behind.
	lagEvery = 8
)

// handle calls the handler and reports whether it returned normally; the
// caller counts it as delivered then.
func (p *WorkerPool) handle(w *poolWorker, m Message) (returned bool) {
	defer func() {
		if r := recover(); r != nil {
			w.panics.Add(1)
			p.recordPanic(m.Channel, r)
		}
	}()
	p.handler(m)
	return true
}

// recordPanic is kept out of handle so that the closure building the error
// cannot make the compiler move handle's message to the heap.
func (p *WorkerPool) recordPanic(channel string, r any) {
	opened := p.panics.add(channel, func() error {
		// debug.Stack here still shows the handler's frames: the deferred
		// recover runs on top of the panicking stack.
		return fmt.Errorf("%w: channel %q: %v\n%s", ErrHandlerPanic, channel, r, debug.Stack())
	})
	if opened {
		p.wakeReporter()
	}
}

func (p *WorkerPool) wakeReporter() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// report turns open loss windows into events: it sleeps until a window
// opens, then reports every reportInterval until an interval passes with no
// new loss, then sleeps again.
func (p *WorkerPool) report() {
	defer close(p.reporterDone)
	timer := time.NewTimer(p.reportInterval)
	timer.Stop()
	for {
		select {
		case <-p.kick:
		case <-p.stop:
			p.flush()
			return
		}
		for reported := true; reported; reported = p.flush() {
			timer.Reset(p.reportInterval)
			select {
			case <-timer.C:
			case <-p.stop:
				timer.Stop()
				p.flush()
				return
			}
		}
	}
}

// flush emits the pending loss events and reports whether there were any.
func (p *WorkerPool) flush() bool {
	now := time.Now()
	ev1, ok1 := p.drops.take(EventDropped, now)
	if ok1 {
		p.emit(ev1)
	}
	ev2, ok2 := p.panics.take(EventError, now)
	if ok2 {
		p.emit(ev2)
	}
	return ok1 || ok2
}

// lossWindow aggregates losses of one kind between two reports.
type lossWindow struct {
	mu        sync.Mutex
	count     uint64
	since     time.Time
	seen      map[string]struct{}
	channels  []string
	truncated bool
	err       error
}

// add records one loss on channel and reports whether it opened the
// window. makeErr, if not nil, is called for the first loss of a window
// only, so that a flood of losses builds one error, not one per loss.
func (w *lossWindow) add(channel string, makeErr func() error) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	opened := w.count == 0
	w.count++
	if opened {
		w.since = time.Now()
		if makeErr != nil {
			w.err = makeErr()
		}
	}
	if _, ok := w.seen[channel]; ok {
		return opened
	}
	if len(w.channels) >= maxReportedChannels {
		w.truncated = true
		return opened
	}
	if w.seen == nil {
		w.seen = make(map[string]struct{})
	}
	w.seen[channel] = struct{}{}
	w.channels = append(w.channels, channel)
	return opened
}

// take closes the window at now and returns its event, or false when no
// loss happened since the last take.
func (w *lossWindow) take(kind EventKind, now time.Time) (Event, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.count == 0 {
		return Event{}, false
	}
	// A loss that opened the window after the caller read now (the lock
	// was taken meanwhile) must not end the window before it began.
	now = maxTime(now, w.since)
	ev := Event{
		Kind:      kind,
		Channels:  w.channels,
		Since:     w.since,
		Until:     now,
		Count:     w.count,
		Truncated: w.truncated,
		Err:       w.err,
	}
	// The event owns the channel slice from here on; the map is reused.
	w.channels = nil
	clear(w.seen)
	w.count = 0
	w.since = time.Time{}
	w.truncated = false
	w.err = nil
	return ev, true
}

// maxTime returns the later of a and b.
func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
