package main

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardcast/shardcast/bench/internal/engines"
)

// publishers is a set of closed-loop publishing goroutines: goroutine g
// publishes a time-stamped payload to channels g, g+n, g+2n, … as fast as
// publish returns, until halt.
type publishers struct {
	stop   atomic.Bool
	wg     sync.WaitGroup
	win    *window // nil: inWindow counts nothing
	counts []pubCount

	// firstErr holds the first publish error's text.
	firstErr atomic.Value
}

// pubCount is one goroutine's successful publishes: all of them, and
// those whose stamp lies inside win (the set the receive side counts).
type pubCount struct {
	n, inWin atomic.Uint64
	_        [48]byte // one cache line per goroutine
}

// count records one successful publish stamped at ns.
func (s *publishers) count(g int, ns int64) {
	s.counts[g].n.Add(1)
	if s.win != nil && s.win.contains(ns) {
		s.counts[g].inWin.Add(1)
	}
}

// inWindow returns how many successful publishes were stamped inside win,
// whenever they completed: the same messages a receiver counts by stamp.
func (s *publishers) inWindow() uint64 {
	var total uint64
	for i := range s.counts {
		total += s.counts[i].inWin.Load()
	}
	return total
}

// payloadSource hands one publisher goroutine its payloads: payload bytes
// (at least the 8-byte stamp) stamped with the time of the call.
type payloadSource struct {
	tmpl  []byte
	fresh bool
}

// newPayloadSource returns a source of payload-byte messages. With fresh,
// every message is a new allocation, as an application's encoder makes
// one per message; without, it is the same buffer each time, stamped
// again (the caller is done with the last one when it asks for the next).
func newPayloadSource(payload int, fresh bool) payloadSource {
	tmpl := make([]byte, max(payload, 8))
	for i := range tmpl[8:] {
		tmpl[8+i] = 'a' + byte(i%26)
	}
	return payloadSource{tmpl: tmpl, fresh: fresh}
}

// next returns the next payload, stamped with now.
func (p payloadSource) next(now time.Time) []byte {
	buf := p.tmpl
	if p.fresh {
		buf = make([]byte, len(p.tmpl))
		copy(buf[8:], p.tmpl[8:])
	}
	engines.Stamp(buf, now)
	return buf
}

// startPublishers starts n publishers of payload-byte messages (at least
// the 8-byte stamp), each message a fresh allocation when fresh. After a
// failed publish a goroutine waits pause.
func startPublishers(ctx context.Context, win *window, n, payload int, fresh bool, channels []string, pause time.Duration,
	publish func(g int, channel string, buf []byte) error) *publishers {
	s := &publishers{win: win, counts: make([]pubCount, n)}
	for g := range n {
		s.wg.Go(func() {
			src := newPayloadSource(payload, fresh)
			for idx := g; !s.stop.Load() && ctx.Err() == nil; idx += n {
				now := time.Now()
				buf := src.next(now)
				if err := publish(g, channels[idx%len(channels)], buf); err != nil {
					s.firstErr.CompareAndSwap(nil, err.Error())
					if pause > 0 {
						time.Sleep(pause)
					}
				} else {
					s.count(g, now.UnixNano())
				}
			}
		})
	}
	return s
}

// sent returns how many publishes succeeded so far.
func (s *publishers) sent() uint64 {
	var total uint64
	for i := range s.counts {
		total += s.counts[i].n.Load()
	}
	return total
}

// halt stops the publishers and waits for them.
func (s *publishers) halt() {
	s.stop.Store(true)
	s.wg.Wait()
}
