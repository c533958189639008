package pool

// wakeUp wakes the worker if it is still asleep: of several submitters
// that saw it asleep, only the first sends.
func (w *worker) wakeUp() {
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
func (w *worker) take(b *workerBatch) (n int, slept bool) {
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
func (w *worker) queued() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n + int(w.held.Load())
}
