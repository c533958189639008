package centrifugebroker

import (
	"context"
	"sync/atomic"
	"time"
)

// sharedDeadlines hands out the contexts that bound publishes, one of
// Centrifuge's calls per message: the publishes that start within slack
// of each other share one context, so that a publish costs no timer of
// its own (a context.WithTimeout per publish starts and stops a timer
// and makes a Done channel: about as much CPU as decoding a message).
type sharedDeadlines struct {
	timeout, slack time.Duration
	cur            atomic.Pointer[sharedDeadline]
}

// sharedDeadline is one shared context and when it ends.
type sharedDeadline struct {
	ctx    context.Context
	cancel context.CancelFunc
	end    time.Time
}

// deadlineSlackDivisor sets the slack as a share of the timeout: a call's
// context ends between 63/64 of the timeout and the timeout after the call
// started, and a new context is made at most 64 times per timeout.
const deadlineSlackDivisor = 64

func newSharedDeadlines(timeout time.Duration) *sharedDeadlines {
	return &sharedDeadlines{timeout: timeout, slack: timeout / deadlineSlackDivisor}
}

// get returns a context that ends no later than the timeout from now, and
// no sooner than the timeout less the slack. Nobody cancels it: it ends at
// its deadline, when its timer releases it.
func (s *sharedDeadlines) get() context.Context {
	now := time.Now()
	if d := s.cur.Load(); d != nil && d.end.Sub(now) > s.timeout-s.slack {
		return d.ctx
	}
	end := now.Add(s.timeout)
	ctx, cancel := context.WithDeadline(context.Background(), end)
	// Callers racing here each make one; the last stored is kept, and the
	// others end at their deadlines like any other.
	s.cur.Store(&sharedDeadline{ctx: ctx, cancel: cancel, end: end})
	return ctx
}

// stop cancels the current context. Calls made after Close fail anyway;
// this only releases its timer early.
func (s *sharedDeadlines) stop() {
	if d := s.cur.Swap(nil); d != nil {
		d.cancel()
	}
}
