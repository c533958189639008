package pool

import (
	"time"

	"github.com/shardcast/shardcast/internal/hist"
	"github.com/shardcast/shardcast/internal/observe"
)

// work runs w's messages through the handler, recording each message's
// lag and sampled handler durations. To keep clock reads and atomic stores
// (locked instructions on amd64) off the per-message cost, it reads the
// clock once per batch, after each timed call and after every lagEvery-th
// untimed one (every call, once one took exactDuration: lags are exact
// while handlers are slow), and publishes its counters at those points:
// lags before deliveries, so that a reader who sees a delivery sees its
// lag. A lag is short by at most the lagEvery-1 calls before it, and the
// Stats trail by at most lagEvery calls.
func (p *Pool) work(w *worker) {
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
// messages to the handler one at a time; see Feeder.SubmitCopy).
type batchRunner struct {
	clock workerClock
	lags  hist.Tally
	b     workerBatch
}

// run hands the n messages of r's batch, taken from w's queue, to the
// handler, as work describes. Only the goroutine that took them from w
// may run them, and only one batch of w runs at a time: run writes w's
// counters and histograms as their only writer.
func (p *Pool) run(w *worker, r *batchRunner, n int) {
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
			r.lags.Record(&w.lag, r.clock.lag(now, m.PublishedAt))
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
					w.handling.RecordOwned(d)
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
			r.lags.Flush(&w.lag)
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
// caller counts it as delivered then. A panic is counted and told to
// Losses from the recovering defer, on top of the panicking stack.
func (p *Pool) handle(w *worker, m Message) (returned bool) {
	defer func() {
		if r := recover(); r != nil {
			w.panics.Add(1)
			if p.losses != nil {
				p.losses.Panicked(m.Channel, r)
			}
		}
	}()
	p.handler(m)
	return true
}
