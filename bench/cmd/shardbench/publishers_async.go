package main

import (
	"context"
	"time"

	"github.com/shardcast/shardcast/bench/internal/engines"
)

// asyncWindow is how many PublishAsync calls each publisher goroutine
// keeps in flight: redis-benchmark -P 16's depth per connection.
const asyncWindow = 16

// startAsyncPublishers is startPublishers for an engine's PublishAsync:
// goroutine g publishes to channels g, g+n, … keeping up to asyncWindow
// calls in flight, and counts a message when its done hears nil; each
// message is a fresh allocation when fresh. halt waits for the outcomes
// of the calls in flight.
func startAsyncPublishers(ctx context.Context, win *window, n, payload int, fresh bool, channels []string, eng engines.AsyncEngine) *publishers {
	s := &publishers{win: win, counts: make([]pubCount, n)}
	for g := range n {
		s.wg.Go(func() {
			src := newPayloadSource(payload, fresh)
			window := make(chan struct{}, asyncWindow)
			// Two prebuilt callbacks, so that an outcome is counted by
			// where its stamp lies without a closure per call.
			outcome := func(inWin bool) func(error) {
				return func(err error) { // on the connection's reader: no blocking
					if err != nil {
						s.firstErr.CompareAndSwap(nil, err.Error())
					} else {
						s.counts[g].n.Add(1)
						if inWin {
							s.counts[g].inWin.Add(1)
						}
					}
					<-window
				}
			}
			doneIn, doneOut := outcome(true), outcome(false)
			for idx := g; !s.stop.Load() && ctx.Err() == nil; idx += n {
				window <- struct{}{}
				// The payload is encoded before PublishAsync returns: a
				// reused buffer may be stamped again for the next call.
				now := time.Now()
				buf := src.next(now)
				done := doneOut
				if win != nil && win.contains(now.UnixNano()) {
					done = doneIn
				}
				if err := eng.PublishAsync(ctx, channels[idx%len(channels)], buf, done); err != nil {
					<-window
					s.firstErr.CompareAndSwap(nil, err.Error())
				}
			}
			for range cap(window) {
				window <- struct{}{} // every outcome is in
			}
		})
	}
	return s
}
