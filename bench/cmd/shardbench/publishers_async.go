package main

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/shardcast/shardcast/bench/internal/engines"
)

// asyncWindow is how many PublishAsync calls each publisher goroutine
// keeps in flight: redis-benchmark -P 16's depth per connection.
const asyncWindow = 16

// startAsyncPublishers is startPublishers for an engine's PublishAsync:
// goroutine g publishes to channels g, g+n, … keeping up to asyncWindow
// calls in flight, and counts a message when its done hears nil. halt
// waits for the outcomes of the calls in flight.
func startAsyncPublishers(ctx context.Context, n, payload int, channels []string, eng engines.AsyncEngine) *publishers {
	s := &publishers{}
	s.counts = make([]struct {
		n atomic.Uint64
		_ [56]byte
	}, n)
	for g := range n {
		s.wg.Go(func() {
			buf := make([]byte, max(payload, 8))
			for i := range buf[8:] {
				buf[8+i] = 'a' + byte(i%26)
			}
			window := make(chan struct{}, asyncWindow)
			done := func(err error) { // on the connection's reader: no blocking
				if err != nil {
					s.firstErr.CompareAndSwap(nil, err.Error())
				} else {
					s.counts[g].n.Add(1)
				}
				<-window
			}
			for idx := g; !s.stop.Load() && ctx.Err() == nil; idx += n {
				window <- struct{}{}
				// The payload is encoded before PublishAsync returns: buf
				// may be stamped again for the next call.
				engines.Stamp(buf, time.Now())
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
