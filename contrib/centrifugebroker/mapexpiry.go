package centrifugebroker

import (
	"container/heap"
	"context"
	"sync"
	"time"
)

// mapSweepPerRun bounds the expired entries one sweeper script removes;
// a channel with more is visited again at once.
const mapSweepPerRun = 1000

// expirySweeper removes the expired entries of the map channels its
// MapBroker's node is subscribed to, so that their removal reaches
// subscribers although nobody writes or reads the channel. It visits a
// channel only when an entry may be due: when the node subscribes, KeyTTL
// after a live update (an entry it set expires no earlier), when the sweep
// script says the next entry expires, and after the engine reported lost
// messages. So its scripts follow the rate entries expire at, not the
// number of subscribed channels. interval is the least time between two
// visits of one channel: expiries closer than that go in one visit. It is
// owned by the MapBroker, whose Close stops it.
type expirySweeper struct {
	m        *MapBroker
	interval time.Duration

	mu    sync.Mutex
	ttl   map[string]time.Duration // subscribed channel with expiry → its KeyTTL
	due   map[string]time.Time     // channel → its next visit
	queue dueQueue                 // the visits, stale ones included
	wake  chan struct{}            // an earlier visit was queued

	quit   chan struct{}
	done   chan struct{}
	errLog logLimit
}

func startExpirySweeper(m *MapBroker, interval time.Duration) *expirySweeper {
	s := &expirySweeper{
		m: m, interval: interval,
		ttl: make(map[string]time.Duration), due: make(map[string]time.Time),
		wake: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{}),
	}
	go s.run()
	return s
}

// subscribed starts following ch, a channel whose entries expire after
// keyTTL, and visits it at once: it may hold entries from before.
func (s *expirySweeper) subscribed(ch string, keyTTL time.Duration) {
	s.mu.Lock()
	s.ttl[ch] = keyTTL
	s.mu.Unlock()
	s.schedule(ch, time.Now())
}

// unsubscribed stops following ch.
func (s *expirySweeper) unsubscribed(ch string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.ttl, ch)
	delete(s.due, ch)
}

// updated notes a live update of ch: an entry it set falls due KeyTTL
// from now at the earliest.
func (s *expirySweeper) updated(ch string) {
	s.mu.Lock()
	ttl, ok := s.ttl[ch]
	s.mu.Unlock()
	if ok {
		s.schedule(ch, time.Now().Add(ttl))
	}
}

// lost visits channels at once, or every followed channel if all: after
// lost messages, live updates that would have scheduled visits may be
// missing.
func (s *expirySweeper) lost(channels []string, all bool) {
	now := time.Now()
	if all {
		s.mu.Lock()
		channels = make([]string, 0, len(s.ttl))
		for ch := range s.ttl {
			channels = append(channels, ch)
		}
		s.mu.Unlock()
	}
	for _, ch := range channels {
		s.schedule(ch, now)
	}
}

// schedule makes ch's next visit at at, unless ch is not followed or an
// earlier one is queued.
func (s *expirySweeper) schedule(ch string, at time.Time) {
	s.mu.Lock()
	if _, ok := s.ttl[ch]; !ok {
		s.mu.Unlock()
		return
	}
	if cur, ok := s.due[ch]; ok && !cur.After(at) {
		s.mu.Unlock()
		return
	}
	s.due[ch] = at
	heap.Push(&s.queue, dueVisit{ch: ch, at: at})
	first := s.queue[0].at.Equal(at)
	s.mu.Unlock()
	if first {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

// takeDue removes and returns the channels due by now, and when the next
// visit after them is (zero if none is queued).
func (s *expirySweeper) takeDue(now time.Time) (channels []string, next time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.queue) > 0 {
		v := s.queue[0]
		if cur, ok := s.due[v.ch]; !ok || !cur.Equal(v.at) {
			heap.Pop(&s.queue) // stale: rescheduled earlier, or unfollowed
			continue
		}
		if v.at.After(now) {
			return channels, v.at
		}
		heap.Pop(&s.queue)
		delete(s.due, v.ch)
		channels = append(channels, v.ch)
	}
	return channels, time.Time{}
}

func (s *expirySweeper) run() {
	defer close(s.done)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		channels, next := s.takeDue(time.Now())
		for _, ch := range channels {
			select {
			case <-s.quit:
				return
			default:
			}
			s.visit(ch)
		}
		if len(channels) > 0 {
			continue // a visit may have queued one that is due already
		}
		wait := time.Hour
		if !next.IsZero() {
			wait = time.Until(next)
		}
		timer.Reset(wait)
		select {
		case <-s.quit:
			return
		case <-s.wake:
		case <-timer.C:
		}
		timer.Stop() // Reset then starts afresh: no stale tick (Go 1.23+ timers)
	}
}

// visit sweeps ch once and queues its next visit: at once if it had more
// expired entries than one script removes, when its next entry expires
// (not sooner than interval), or after interval if the sweep failed.
func (s *expirySweeper) visit(ch string) {
	ctx, cancel := context.WithTimeout(context.Background(), s.m.b.callTimeout)
	_, swept, next, err := s.m.sweep(ctx, ch, mapSweepPerRun)
	cancel()
	now := time.Now()
	switch {
	case err != nil:
		if s.errLog.allow() {
			s.m.b.log.Warn("centrifugebroker: removing expired map entries failed; retried", "channel", ch, "err", err, "in", s.interval)
		}
		s.schedule(ch, now.Add(s.interval))
	case swept >= mapSweepPerRun:
		s.schedule(ch, now)
	case next >= 0:
		s.schedule(ch, now.Add(max(next, s.interval)))
	}
}

func (s *expirySweeper) stop() {
	close(s.quit)
	<-s.done
}

// dueVisit is one queued visit of a channel.
type dueVisit struct {
	ch string
	at time.Time
}

// dueQueue is a min-heap of visits by time (container/heap).
type dueQueue []dueVisit

func (q dueQueue) Len() int           { return len(q) }
func (q dueQueue) Less(i, j int) bool { return q[i].at.Before(q[j].at) }
func (q dueQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *dueQueue) Push(x any)        { *q = append(*q, x.(dueVisit)) }
func (q *dueQueue) Pop() any {
	old := *q
	v := old[len(old)-1]
	*q = old[:len(old)-1]
	return v
}
