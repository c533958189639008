package pool

import "github.com/shardcast/shardcast/internal/hist"

// Dropped returns the number of messages Submit dropped because a queue was
// full, since the pool started.
func (p *Pool) Dropped() uint64 {
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
func (p *Pool) Delivered() uint64 {
	var n uint64
	for i := range p.workers {
		n += p.workers[i].delivered.Load()
	}
	return n
}

// Panics returns the number of handler calls that panicked, since the pool
// started.
func (p *Pool) Panics() uint64 {
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
func (p *Pool) QueueDepth() int {
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
func (p *Pool) QueueHighWater() int {
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
func (w *worker) observe() int64 {
	now := int64(w.queued())
	w.raise(now)
	return now
}

// raise lifts w's high-water mark to v if v is higher.
func (w *worker) raise(v int64) {
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
func (p *Pool) Latency() (lag, handling hist.Snapshot) {
	for i := range p.workers {
		w := &p.workers[i]
		lag.AddFrom(&w.lag)
		handling.AddFrom(&w.handling)
	}
	return lag, handling
}
