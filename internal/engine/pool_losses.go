package engine

import (
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/shardcast/shardcast"
)

// poolReportInterval is the shortest time between two reports of the
// worker pool's losses of one kind: an overload drops messages by the
// thousand, and one event per drop would bury the application in reports.
const poolReportInterval = 100 * time.Millisecond

// maxPoolChannels caps Event.Channels of one report of pool losses, so an
// overload across millions of channels cannot grow one event without
// bound.
const maxPoolChannels = 1000

// poolLosses hears of the worker pool's drops (a full queue) and handler
// panics (it is the pool's pool.Losses) and gathers each kind in a window
// the ledger reports (ledger.reportPool): the first loss of a window sets
// a timer of interval, whose report closes the window; a loss after it
// opens the next one.
type poolLosses struct {
	l        *ledger
	interval time.Duration

	mu     sync.Mutex
	drops  lossWindow
	panics lossWindow
	timer  *time.Timer // set while a report is due
	closed bool
}

// lossWindow is the pool's losses of one kind since the last report.
type lossWindow struct {
	count     uint64
	since     time.Time
	seen      map[string]struct{}
	channels  []string
	truncated bool
	err       error // the first panic's, with its stack
}

// Dropped records a message of channel dropped at a full queue; arrived,
// when not zero, is when a held message came (see pool.Pool.SubmitHeld).
func (pl *poolLosses) Dropped(channel string, arrived time.Time) {
	pl.add(&pl.drops, channel, arrived, nil)
}

// Panicked records a handler call on channel that panicked with value.
// It runs inside the pool's recovering defer, so the stack it takes for
// the window's first panic still shows the handler's frames.
func (pl *poolLosses) Panicked(channel string, value any) {
	pl.add(&pl.panics, channel, time.Time{}, func() error {
		return fmt.Errorf("%w: channel %q: %v\n%s", shardcast.ErrHandlerPanic, channel, value, debug.Stack())
	})
}

// add records one loss on channel in w. makeErr, if not nil, is called
// for the first loss of a window only, so that a flood of losses builds
// one error, not one per loss.
func (pl *poolLosses) add(w *lossWindow, channel string, arrived time.Time, makeErr func() error) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if pl.closed {
		return
	}
	w.add(channel, arrived, makeErr)
	if pl.timer == nil {
		pl.timer = time.AfterFunc(pl.interval, pl.flush)
	}
}

// add records one loss on channel, opening the window at the first; a
// held message that arrived before the window opened moves its start back
// to its arrival, so that the window covers the message's time.
func (w *lossWindow) add(channel string, arrived time.Time, makeErr func() error) {
	if w.count == 0 {
		w.since = time.Now()
		if makeErr != nil {
			w.err = makeErr()
		}
	}
	w.count++
	if !arrived.IsZero() && arrived.Before(w.since) {
		w.since = arrived
	}
	if _, ok := w.seen[channel]; ok {
		return
	}
	if len(w.channels) >= maxPoolChannels {
		w.truncated = true
		return
	}
	if w.seen == nil {
		w.seen = make(map[string]struct{})
	}
	w.seen[channel] = struct{}{}
	w.channels = append(w.channels, channel)
}

// take empties w and returns what it held; the caller owns the channel
// slice.
func (w *lossWindow) take() lossWindow {
	out := *w
	out.seen = nil
	clear(w.seen)
	*w = lossWindow{seen: w.seen}
	return out
}

// flush reports both windows, if not empty. Events are emitted under the
// lock, so that close returns only once every report is queued.
func (pl *poolLosses) flush() {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	pl.timer = nil
	now := time.Now()
	if pl.drops.count > 0 {
		pl.l.reportPool(shardcast.EventDropped, pl.drops.take(), now)
	}
	if pl.panics.count > 0 {
		pl.l.reportPool(shardcast.EventError, pl.panics.take(), now)
	}
}

// close reports what is pending at once; later losses are not reported.
// Call it once the pool is closed.
func (pl *poolLosses) close() {
	pl.mu.Lock()
	pl.closed = true
	if pl.timer != nil {
		pl.timer.Stop()
	}
	pl.mu.Unlock()
	pl.flush()
}
