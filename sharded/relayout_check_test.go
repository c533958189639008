package sharded

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// This file holds a per-message checker for re-layouts under faults: every
// publisher numbers its messages per channel and remembers when each
// Publish call began and ended and whether it failed; every subscriber
// remembers what it got. The check then accounts for every accepted
// message at every subscriber: delivered once, or lost inside a window its
// broker reported for the channel (EventInterrupted/EventRestored,
// EventDropped); delivered in order, or out of order on a channel an
// EventRelayout wrapping ErrRelayoutOrder named.

// sentMsg is one Publish call: when it began and ended, and whether it
// failed (then Redis may or may not have taken it).
type sentMsg struct {
	start, end int64
	failed     bool
}

// seqPublisher publishes to every channel in turn, numbering each
// channel's messages, until stopped.
type seqPublisher struct {
	name string
	log  map[string][]sentMsg // channel → message seq-1; read after stop
	n    atomic.Int64         // publishes accepted
	errs atomic.Int64
}

func (p *seqPublisher) run(b *Broker, channels []string, stop <-chan struct{}, timeout time.Duration) {
	for {
		for _, ch := range channels {
			select {
			case <-stop:
				return
			default:
			}
			seq := len(p.log[ch]) + 1
			m := sentMsg{start: time.Now().UnixNano()}
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			err := b.Publish(ctx, ch, []byte(p.name+":"+strconv.Itoa(seq)))
			cancel()
			m.end, m.failed = time.Now().UnixNano(), err != nil
			p.log[ch] = append(p.log[ch], m)
			if err != nil {
				p.errs.Add(1)
			} else {
				p.n.Add(1)
			}
		}
	}
}

// seqSubscriber is a Handler that records every delivery of numbered
// messages, per channel and publisher.
type seqSubscriber struct {
	mu  sync.Mutex
	got map[string][]int // channel + "|" + publisher → seqs in delivery order
}

func newSeqSubscriber() *seqSubscriber { return &seqSubscriber{got: map[string][]int{}} }

func (s *seqSubscriber) handle(m shardcast.Message) {
	pub, seqs, ok := strings.Cut(string(m.Payload), ":")
	if !ok {
		return
	}
	seq, err := strconv.Atoi(seqs)
	if err != nil {
		return
	}
	k := m.Channel + "|" + pub
	s.mu.Lock()
	s.got[k] = append(s.got[k], seq)
	s.mu.Unlock()
}

func (s *seqSubscriber) count(k string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.got[k])
}

// faultFigures accounts for the accepted messages at the subscribers
// (each message counts once per subscriber).
type faultFigures struct {
	Published       int // accepted publishes × subscribers
	Failed          int // failed publishes (not counted in Published)
	Lost            int // accepted, never delivered
	LostReported    int // of those, inside a reported window of the channel
	LostSilent      int // lost outside every reported window
	Duplicates      int
	Reordered       int // accepted messages delivered after a later one
	ReorderReported int // of those, on a channel an ErrRelayoutOrder event named
	LateFailed      int // failed publishes delivered after a later one (allowed)
	Samples         []string
}

func (f faultFigures) String() string {
	return fmt.Sprintf("published %d (failed %d), lost %d (in reported windows %d, silent %d), duplicates %d, reordered %d (reported %d), late failed %d",
		f.Published, f.Failed, f.Lost, f.LostReported, f.LostSilent, f.Duplicates, f.Reordered, f.ReorderReported, f.LateFailed)
}

type span struct{ since, until int64 }

// reported collects, from one broker's events, the windows in which it
// may have lost each channel's messages and the channels whose order at
// the switch it did not guarantee.
type reported struct {
	windows    map[string][]span
	every      []span // truncated drop reports
	orderChans map[string]bool
}

func reportedBy(evs []shardcast.Event) reported {
	r := reported{windows: map[string][]span{}, orderChans: map[string]bool{}}
	open := map[string]int64{} // channel → since of an interruption not yet restored
	now := time.Now().UnixNano()
	for _, ev := range evs {
		switch ev.Kind {
		case shardcast.EventInterrupted:
			for _, ch := range ev.Channels {
				if _, ok := open[ch]; !ok {
					open[ch] = ev.Since.UnixNano()
				}
			}
		case shardcast.EventRestored, shardcast.EventDropped:
			w := span{ev.Since.UnixNano(), ev.Until.UnixNano()}
			if ev.Until.IsZero() {
				w.until = now
			}
			for _, ch := range ev.Channels {
				r.windows[ch] = append(r.windows[ch], w)
				if ev.Kind == shardcast.EventRestored {
					delete(open, ch)
				}
			}
			if ev.Kind == shardcast.EventDropped && ev.Truncated {
				r.every = append(r.every, w)
			}
		case shardcast.EventRelayout:
			if errors.Is(ev.Err, shardcast.ErrRelayoutOrder) {
				for _, ch := range ev.Channels {
					r.orderChans[ch] = true
				}
			}
		}
	}
	for ch, since := range open {
		r.windows[ch] = append(r.windows[ch], span{since, now})
	}
	return r
}

func (r reported) covers(ch string, m sentMsg, tol int64) bool {
	for _, w := range append(r.windows[ch], r.every...) {
		if m.end >= w.since-tol && m.start <= w.until+tol {
			return true
		}
	}
	return false
}

// checkMessages accounts for every message the publishers sent at every
// subscriber that wants its channel (each subscriber with the events its
// broker raised; wants nil means every subscriber wants every channel);
// tol is the slack between a Publish call and a reported window.
func checkMessages(pubs []*seqPublisher, subs []*seqSubscriber, evs []*events, wants func(sub int, ch string) bool, tol time.Duration) faultFigures {
	var f faultFigures
	sample := func(format string, args ...any) {
		if len(f.Samples) < 10 {
			f.Samples = append(f.Samples, fmt.Sprintf(format, args...))
		}
	}
	for _, p := range pubs {
		for _, log := range p.log {
			for _, m := range log {
				if m.failed {
					f.Failed++
				}
			}
		}
	}
	for i, s := range subs {
		rep := reportedBy(evs[i].All())
		s.mu.Lock()
		for _, p := range pubs {
			for ch, log := range p.log {
				if wants != nil && !wants(i, ch) {
					continue
				}
				seen := make([]bool, len(log))
				top := 0
				for _, seq := range s.got[ch+"|"+p.name] {
					if seq < 1 || seq > len(log) {
						continue
					}
					m := log[seq-1]
					switch {
					case seen[seq-1]:
						f.Duplicates++
						sample("subscriber %d: %s #%d from %s delivered twice", i, ch, seq, p.name)
					case seq < top && m.failed:
						f.LateFailed++
					case seq < top:
						f.Reordered++
						if rep.orderChans[ch] {
							f.ReorderReported++
						} else {
							sample("subscriber %d: %s #%d from %s delivered after #%d, not reported", i, ch, seq, p.name, top)
						}
					}
					seen[seq-1] = true
					top = max(top, seq)
				}
				for k, m := range log {
					if m.failed {
						continue
					}
					f.Published++
					if seen[k] {
						continue
					}
					f.Lost++
					if rep.covers(ch, m, tol.Nanoseconds()) {
						f.LostReported++
						if f.LostReported <= 3 {
							sample("subscriber %d: %s #%d from %s (published %s) lost inside a reported window", i, ch, k+1, p.name,
								time.Unix(0, m.start).Format("15:04:05.000"))
						}
					} else {
						f.LostSilent++
						sample("subscriber %d: %s #%d from %s (published %s..%s) lost outside every reported window", i, ch, k+1, p.name,
							time.Unix(0, m.start).Format("15:04:05.000"), time.Unix(0, m.end).Format("15:04:05.000"))
					}
				}
			}
		}
		s.mu.Unlock()
	}
	return f
}

// faultFleet is brokers that each subscribe every channel and publish to
// all of them, numbered, while a re-layout runs and faults strike.
type faultFleet struct {
	t        *testing.T
	channels []string
	brokers  []*Broker
	subs     []*seqSubscriber
	evs      []*events
	pubs     []*seqPublisher
	stop     chan struct{}
	wg       sync.WaitGroup
	timeout  time.Duration // of each Publish call
}

// faultConn are connection settings that notice a dead or frozen
// instance quickly, so that the fault tests stay short.
var faultConn = shardcast.ConnOptions{
	DialTimeout: time.Second, CommandTimeout: time.Second,
	HealthInterval: 100 * time.Millisecond, HealthTimeout: 300 * time.Millisecond,
	ReplyTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond,
	ReconnectMax: 200 * time.Millisecond, RecoveryInterval: 100 * time.Millisecond,
}

func newFaultFleet(t *testing.T, n int, cfg Config, channels []string) *faultFleet {
	f := &faultFleet{t: t, channels: channels, stop: make(chan struct{}), timeout: 2 * time.Second}
	for i := range n {
		sub, ev := newSeqSubscriber(), &events{}
		c := cfg
		c.Options = shardcast.Options{Handler: sub.handle, OnEvent: ev.Add, QueueSize: 1 << 16}
		b := newBroker(t, c)
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		require.NoError(t, b.Subscribe(ctx, channels...))
		cancel()
		f.brokers, f.subs, f.evs = append(f.brokers, b), append(f.subs, sub), append(f.evs, ev)
		f.pubs = append(f.pubs, &seqPublisher{name: "p" + strconv.Itoa(i), log: map[string][]sentMsg{}})
	}
	for i, b := range f.brokers {
		p := f.pubs[i]
		share := func(g int) []string {
			var out []string
			for k := g; k < len(channels); k += faultPublishers {
				out = append(out, channels[k])
			}
			return out
		}
		mine := share(0)
		f.wg.Go(func() { p.run(b, mine, f.stop, f.timeout) })
		for g := 1; g < faultPublishers; g++ {
			q := &seqPublisher{name: p.name + "." + strconv.Itoa(g), log: map[string][]sentMsg{}}
			f.pubs = append(f.pubs, q)
			theirs := share(g)
			f.wg.Go(func() { q.run(b, theirs, f.stop, f.timeout) })
		}
	}
	return f
}

// faultPublishers is how many goroutines of each broker publish, each to
// its own share of the channels under a publisher name of its own (the
// first is the broker's seqPublisher, which gets the first share).
var faultPublishers = 1

func (f *faultFleet) published() int64 {
	var n int64
	for _, p := range f.pubs {
		n += p.n.Load()
	}
	return n
}

// waitPublished waits until n more messages were accepted.
func (f *faultFleet) waitPublished(n int64) {
	target := f.published() + n
	waitFor(f.t, fmt.Sprintf("%d messages published", n), func() bool { return f.published() >= target })
}

// finish stops the publishers, waits until every subscriber got every
// accepted message or nothing more arrives for a while, and checks.
func (f *faultFleet) finish(tol time.Duration) faultFigures {
	close(f.stop)
	f.wg.Wait()
	waitDelivered(f.subs, int(f.published())*len(f.subs))
	return checkMessages(f.pubs, f.subs, f.evs, nil, tol)
}

// waitDelivered waits until the subscribers got want messages in all, or
// nothing more arrived for two seconds (a loaded machine may pause the
// handlers that long): losses inside reported windows are
// allowed, so it cannot wait for every message.
func waitDelivered(subs []*seqSubscriber, want int) {
	total := func() int {
		n := 0
		for _, s := range subs {
			s.mu.Lock()
			for _, g := range s.got {
				n += len(g)
			}
			s.mu.Unlock()
		}
		return n
	}
	deadline := time.Now().Add(waitTimeout)
	last, quietSince := -1, time.Now()
	for time.Now().Before(deadline) {
		n := total()
		if n >= want {
			break
		}
		if n != last {
			last, quietSince = n, time.Now()
		} else if time.Since(quietSince) > 2*time.Second {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// assertClean checks the properties every fault test requires and logs
// the figures.
func assertClean(t *testing.T, fig faultFigures) {
	t.Helper()
	t.Logf("figures: %v", fig)
	for _, s := range fig.Samples {
		t.Log("  ", s)
	}
	assert.NotZero(t, fig.Published)
	assert.Zero(t, fig.LostSilent, "lost outside a reported window")
	assert.Zero(t, fig.Duplicates, "duplicates")
	assert.Equal(t, fig.Reordered, fig.ReorderReported, "reordered without a report")
}
