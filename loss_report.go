package shardcast

import (
	"sync"
	"time"
)

// wakeReporter wakes the reporter goroutine, unless a wake-up is pending.
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
// arrived, when not zero, is when the lost message reached the broker, if
// it waited before it was lost (see WorkerPool.SubmitHeld): the window
// then begins no later than that, so that it covers the message's time,
// not only the moment it was dropped.
func (w *lossWindow) add(channel string, arrived time.Time, makeErr func() error) bool {
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
	if !arrived.IsZero() && arrived.Before(w.since) {
		w.since = arrived
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
