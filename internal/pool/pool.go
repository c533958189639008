package pool

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/shardcast/shardcast/internal/hist"
)

// Message is one delivered message, field for field the root package's
// shardcast.Message (which converts to and from it at no cost and
// documents the fields).
type Message struct {
	Channel     string
	Payload     []byte
	PublishedAt time.Time
}

// HandlerOf returns h, a handler of a message type that is field for
// field Message (shardcast.Handler), as a handler of the pool's messages,
// converting each at no cost; nil stays nil. The pool calls the returned
// function and it calls h, so a delivery never calls back up into the
// package that started the pool.
func HandlerOf[M ~struct {
	Channel     string
	Payload     []byte
	PublishedAt time.Time
}](h func(M)) func(Message) {
	if h == nil {
		return nil
	}
	return func(m Message) { h(M(m)) }
}

// Losses hears of every message the pool loses, as it happens: the pool
// counts them (Dropped, Panics) and reports nothing itself; its owner
// turns them into events. The calls come from submitting goroutines and
// workers, Dropped under the worker's queue lock (so that a drop Close
// races with is heard before Close returns), so they must be quick and
// must not call back into the pool.
type Losses interface {
	// Dropped hears of a message of channel dropped because its worker's
	// queue was full. arrived, when not zero, is when the message reached
	// the broker, if it waited before it was submitted (see SubmitHeld).
	Dropped(channel string, arrived time.Time)
	// Panicked hears of a handler call on a message of channel that
	// panicked with value; it runs on the panicking goroutine, inside the
	// recovering defer, so debug.Stack there still shows the handler.
	Panicked(channel string, value any)
}

// Config is what New needs.
type Config struct {
	// Workers is the number of workers; QueueSize the capacity of each
	// worker's queue. Both must be positive.
	Workers, QueueSize int
	// Handler receives the messages; nil discards them.
	Handler func(Message)
	// Losses hears of drops and panics; nil: they are only counted.
	Losses Losses
	// Reuse recycles the payload buffers SubmitCopy copies into once
	// their handler returned (Config.Reuse).
	Reuse bool
	// Inline lets a feeder run an idle worker's message itself
	// (Config.Inline; see Feeder.SubmitCopy).
	Inline bool
}

// Pool runs a handler on a fixed set of worker goroutines, each fed by
// its own bounded queue: the implementation of shardcast.WorkerPool, and
// of an engine's pool, whose read loops feed it through Feeders. A message
// goes to worker hash(channel) mod N, so the messages of one channel are
// handled in the order they were submitted and never concurrently.
//
// Submitting never blocks; a full queue drops the message. A handler panic
// is recovered and the worker goes on. Both are counted and told to the
// Config's Losses.
type Pool struct {
	handler func(Message)
	losses  Losses
	workers []worker
	// reuse: the buffers of SubmitCopy's payloads are recycled once
	// handled (Config.Reuse).
	reuse bool
	// inline: a feeder hands a message whose worker is idle to the
	// handler itself (see Feeder.SubmitCopy).
	inline bool

	workersDone sync.WaitGroup
	closeOnce   sync.Once
}

// worker is one worker's queue and counters. The queue is a ring
// guarded by mu: the worker takes up to takeBatch messages per lock, and a
// submitter wakes it only when it found the worker asleep on an empty
// queue, so a busy worker costs its submitters no wake-up at all. The
// padding keeps the fields written by submitters and those written by the
// worker goroutine on different cache lines.
type worker struct {
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
	// them (see Feeder.SubmitCopy); nil otherwise.
	owned []bool
	free  [][]byte
	_     [64]byte

	// delivered, lag and handling are written by the worker goroutine
	// only (see hist.Histogram.RecordOwned).
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
	lag       hist.Histogram
	handling  hist.Histogram
	_         [64]byte
}

// takeBatch is the most messages a worker takes from its queue at once.
// It bounds the worker's private copy (takeBatch Messages on its stack);
// QueueDepth still counts the ones taken and not handled yet.
const takeBatch = 64

// New starts a pool of cfg.Workers workers. The caller owns it and must
// Close it to stop its goroutines. It panics if cfg.Workers or
// cfg.QueueSize is not positive: the callers apply the defaults.
func New(cfg Config) *Pool {
	if cfg.Workers <= 0 || cfg.QueueSize <= 0 {
		panic(fmt.Sprintf("pool: New with %d workers and queues of %d", cfg.Workers, cfg.QueueSize))
	}
	handler := cfg.Handler
	if handler == nil {
		handler = func(Message) {}
	}
	p := &Pool{
		handler: handler,
		losses:  cfg.Losses,
		workers: make([]worker, cfg.Workers),
		reuse:   cfg.Reuse,
		inline:  cfg.Inline,
	}
	p.workersDone.Add(cfg.Workers)
	for i := range p.workers {
		w := &p.workers[i]
		w.ring = make([]Message, cfg.QueueSize)
		if cfg.Reuse {
			w.owned = make([]bool, cfg.QueueSize)
		}
		w.wake = make(chan struct{}, 1)
		go p.work(w)
	}
	return p
}

// Submit queues m for its channel's worker and reports whether it was
// queued. It never blocks and allocates nothing. When the worker's queue
// is full, m is dropped: counted (see Dropped) and told to Losses. After
// Close, Submit returns false without queueing or counting m: the pool is
// gone, not overloaded.
func (p *Pool) Submit(m Message) bool {
	i := p.workerOf(m.Channel)
	queued, asleep, _ := p.push(i, m, false, nil, time.Time{})
	if asleep {
		p.workers[i].wakeUp()
	}
	return queued
}

// workerOf returns the index of the worker that handles channel.
func (p *Pool) workerOf(channel string) int {
	return int(xxhash.Sum64String(channel) % uint64(len(p.workers)))
}

// push queues m for worker i, or counts it as dropped when that queue is
// full, and reports whether m was queued, whether the worker is asleep
// and must be woken for it, and whether its queue is at least half full
// (a feeder then wakes it at once and yields, see Feeder.submit). owned
// marks m's Payload as the pool's own buffer (Config.Reuse). With
// refill, a feeder's stash of
// buffers, and m queued, push moves the worker's free buffers into the
// stash if it runs low, under the lock it takes anyway: every worker a
// feeder feeds hands back its buffers that way, so none piles up buffers
// to its cap (and drops them) while the feeder allocates new ones.
// arrived, when not zero, dates a drop of m (see SubmitHeld).
func (p *Pool) push(i int, m Message, owned bool, refill *[][]byte, arrived time.Time) (queued, asleep, half bool) {
	w := &p.workers[i]
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return false, false, false
	}
	if w.n == len(w.ring) {
		// Counted and told under mu: once Close has set closed, the
		// owner has heard of every drop Dropped counts.
		w.dropped.Add(1)
		if p.losses != nil {
			p.losses.Dropped(m.Channel, arrived)
		}
		w.mu.Unlock()
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
	half = 2*w.n >= len(w.ring)
	if refill != nil && len(*refill) < refillBelow && len(w.free) > 0 {
		n := min(len(w.free), maxFree-len(*refill))
		rest := len(w.free) - n
		*refill = append(*refill, w.free[rest:]...)
		clear(w.free[rest:])
		w.free = w.free[:rest]
	}
	w.mu.Unlock()
	return true, asleep, half
}

// Close stops accepting messages, lets every worker handle the messages
// already in its queue (it drains rather than discards: a message Submit
// accepted is handed to the handler) and waits for the workers to exit. A
// handler that never returns therefore keeps Close from returning. Close
// is safe to call more than once and from several goroutines; every call
// returns once the workers have stopped. It must not be called from the
// handler, which it would wait for.
func (p *Pool) Close() {
	p.closeOnce.Do(func() {
		for i := range p.workers {
			w := &p.workers[i]
			w.mu.Lock()
			w.closed = true
			w.mu.Unlock()
			w.wakeUp()
		}
		p.workersDone.Wait()
	})
}
