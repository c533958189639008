package brokertest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
)

// This file holds a per-message checker for re-layouts under faults, for
// both engines: every publisher numbers its messages per channel and
// remembers when each Publish call began and ended and whether it failed;
// every subscriber remembers what it got. CheckMessages then accounts for
// every accepted message at every subscriber: delivered once, or lost
// inside a window its broker reported for the channel
// (EventInterrupted/EventRestored, EventDropped); delivered in order, or
// out of order on a channel an EventRelayout wrapping ErrRelayoutOrder
// named. Unlike SeqChecker, which counts, it keeps every delivery, so that
// each loss can be set against the windows.

// SentMessage is one Publish call of a LoggedPublisher: when it began and
// ended (Unix nanoseconds), and whether it failed (then Redis may or may
// not have taken it).
type SentMessage struct {
	Start, End int64
	Failed     bool
}

// LoggedPublisher publishes to every channel in turn, numbering each
// channel's messages ("<Name>:<seq>" payloads), and logs every call.
type LoggedPublisher struct {
	// Name is the publisher's part of each payload.
	Name string
	// Log maps a channel to its calls, message seq at index seq-1; read
	// it once Run returned (SentBefore reads it while Run runs).
	Log      map[string][]SentMessage
	mu       sync.Mutex // guards Log while Run runs
	accepted atomic.Int64
	failed   atomic.Int64
}

// NewLoggedPublisher returns a publisher named name that sent nothing yet.
func NewLoggedPublisher(name string) *LoggedPublisher {
	return &LoggedPublisher{Name: name, Log: map[string][]SentMessage{}}
}

// Run publishes through b until stop closes, each call bounded by
// timeout.
func (p *LoggedPublisher) Run(b shardcast.Broker, channels []string, stop <-chan struct{}, timeout time.Duration) {
	for {
		for _, ch := range channels {
			select {
			case <-stop:
				return
			default:
			}
			seq := len(p.Log[ch]) + 1
			m := SentMessage{Start: time.Now().UnixNano()}
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			err := b.Publish(ctx, ch, []byte(p.Name+":"+strconv.Itoa(seq)))
			cancel()
			m.End, m.Failed = time.Now().UnixNano(), err != nil
			p.mu.Lock()
			p.Log[ch] = append(p.Log[ch], m)
			p.mu.Unlock()
			if err != nil {
				p.failed.Add(1)
			} else {
				p.accepted.Add(1)
			}
		}
	}
}

// SentBefore returns, for every channel the publisher published to, how
// many of its calls began before t; it may be called while Run runs.
func (p *LoggedPublisher) SentBefore(t time.Time) map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]int, len(p.Log))
	for ch, log := range p.Log {
		n, _ := slices.BinarySearchFunc(log, t.UnixNano(), func(m SentMessage, ns int64) int { return cmp.Compare(m.Start, ns) })
		out[ch] = n
	}
	return out
}

// Accepted returns how many publishes succeeded so far.
func (p *LoggedPublisher) Accepted() int64 { return p.accepted.Load() }

// Failed returns how many publishes failed so far.
func (p *LoggedPublisher) Failed() int64 { return p.failed.Load() }

// DeliveryLog is a Handler that records every delivery of numbered
// messages, per channel and publisher, in delivery order. The zero value
// is not ready: use NewDeliveryLog.
type DeliveryLog struct {
	mu  sync.Mutex
	got map[string][]int // channel + "|" + publisher → seqs in delivery order
}

// NewDeliveryLog returns an empty log.
func NewDeliveryLog() *DeliveryLog { return &DeliveryLog{got: map[string][]int{}} }

// Handle is the Handler.
func (s *DeliveryLog) Handle(m shardcast.Message) {
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

// Count returns how many messages of publisher on channel were delivered.
func (s *DeliveryLog) Count(channel, publisher string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.got[channel+"|"+publisher])
}

// Highest returns the highest seq of publisher delivered on channel (0
// if none).
func (s *DeliveryLog) Highest(channel, publisher string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	high := 0
	for _, seq := range s.got[channel+"|"+publisher] {
		high = max(high, seq)
	}
	return high
}

// Total returns how many messages were delivered in all.
func (s *DeliveryLog) Total() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, g := range s.got {
		n += len(g)
	}
	return n
}

// FaultFigures account for the accepted messages at the subscribers (each
// message counts once per subscriber that wants its channel).
type FaultFigures struct {
	Published       int // accepted publishes × subscribers
	Failed          int // failed publishes (not counted in Published)
	Lost            int // accepted, never delivered
	LostReported    int // of those, inside a reported window of the channel
	LostSilent      int // lost outside every reported window
	Duplicates      int
	Reordered       int // accepted messages delivered after a later one
	ReorderReported int // of those, on a channel an ErrRelayoutOrder event named
	LateFailed      int // failed publishes delivered after a later one (allowed)
	// Samples describe a few of the faults, for the test log.
	Samples []string
}

// String formats f for a test log.
func (f FaultFigures) String() string {
	return fmt.Sprintf("published %d (failed %d), lost %d (in reported windows %d, silent %d), duplicates %d, reordered %d (reported %d), late failed %d",
		f.Published, f.Failed, f.Lost, f.LostReported, f.LostSilent, f.Duplicates, f.Reordered, f.ReorderReported, f.LateFailed)
}

type span struct{ since, until int64 }

// reported holds, from one broker's events, the windows in which it may
// have lost each channel's messages and the channels whose order at the
// switch it did not guarantee.
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

// covers reports whether message m of channel ch, lost, falls in one of
// the windows: it ended (was answered) no earlier than tol before the
// window began, and began before the window ended. The slack is needed at
// the start only: a subscriber notices a dead connection a moment after
// the server took its last messages, but a window ends once the
// subscription is confirmed again, and a message published to a
// subscription not yet confirmed began before that.
func (r reported) covers(ch string, m SentMessage, tol int64) bool {
	for _, w := range append(r.windows[ch], r.every...) {
		if m.End >= w.since-tol && m.Start <= w.until {
			return true
		}
	}
	return false
}

// near describes, for the log of a silent loss of a message of channel ch
// published at start, the reported window on ch that began or ended
// closest to it, or says there is none: what a failure in CI needs to
// tell a window that is missing from one that is late or short.
func (r reported) near(ch string, start int64) string {
	ws := r.windows[ch]
	if len(ws) == 0 {
		return fmt.Sprintf("no window on %s (%d windows on other channels)", ch, len(r.windows))
	}
	best, dist := ws[0], int64(math.MaxInt64)
	for _, w := range ws {
		d := min(abs64(w.since-start), abs64(w.until-start))
		if d < dist {
			best, dist = w, d
		}
	}
	return fmt.Sprintf("nearest of %d windows on it %s..%s", len(ws),
		time.Unix(0, best.since).Format("15:04:05.000000"), time.Unix(0, best.until).Format("15:04:05.000000"))
}

func abs64(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}

// CheckMessages accounts for every message the publishers sent at every
// subscriber that wants its channel (subscriber i with the events its
// broker raised, evs[i]; wants nil means every subscriber wants every
// channel); tol is the slack between a Publish call and the start of a
// reported window (a message Redis took just before it failed may be lost
// on a connection the subscriber notices dead a moment later). Call it
// once the publishers stopped.
func CheckMessages(pubs []*LoggedPublisher, subs []*DeliveryLog, evs []*EventLog, wants func(sub int, ch string) bool, tol time.Duration) FaultFigures {
	var f FaultFigures
	sample := func(format string, args ...any) {
		if len(f.Samples) < 10 {
			f.Samples = append(f.Samples, fmt.Sprintf(format, args...))
		}
	}
	for _, p := range pubs {
		for _, log := range p.Log {
			for _, m := range log {
				if m.Failed {
					f.Failed++
				}
			}
		}
	}
	for i, s := range subs {
		rep := reportedBy(evs[i].All())
		s.mu.Lock()
		for _, p := range pubs {
			for ch, log := range p.Log {
				if wants != nil && !wants(i, ch) {
					continue
				}
				seen := make([]bool, len(log))
				top := 0
				for _, seq := range s.got[ch+"|"+p.Name] {
					if seq < 1 || seq > len(log) {
						continue
					}
					m := log[seq-1]
					switch {
					case seen[seq-1]:
						f.Duplicates++
						sample("subscriber %d: %s #%d from %s delivered twice", i, ch, seq, p.Name)
					case seq < top && m.Failed:
						f.LateFailed++
					case seq < top:
						f.Reordered++
						if rep.orderChans[ch] {
							f.ReorderReported++
						} else {
							sample("subscriber %d: %s #%d from %s delivered after #%d, not reported", i, ch, seq, p.Name, top)
						}
					}
					seen[seq-1] = true
					top = max(top, seq)
				}
				for k, m := range log {
					if m.Failed {
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
							sample("subscriber %d: %s #%d from %s (published %s) lost inside a reported window", i, ch, k+1, p.Name,
								time.Unix(0, m.Start).Format("15:04:05.000000"))
						}
					} else {
						f.LostSilent++
						sample("subscriber %d: %s #%d from %s (published %s..%s) lost outside every reported window; %s", i, ch, k+1, p.Name,
							time.Unix(0, m.Start).Format("15:04:05.000000"), time.Unix(0, m.End).Format("15:04:05.000000"), rep.near(ch, m.Start))
					}
				}
			}
		}
		s.mu.Unlock()
	}
	return f
}

// WaitDelivered waits until the subscribers got want messages in all,
// nothing more arrived for two seconds (a loaded machine may pause the
// handlers that long), or timeout passed: losses inside reported windows
// are allowed, so it cannot wait for every message.
func WaitDelivered(subs []*DeliveryLog, want int, timeout time.Duration) {
	total := func() int {
		n := 0
		for _, s := range subs {
			n += s.Total()
		}
		return n
	}
	deadline := time.Now().Add(timeout)
	last, quietSince := -1, time.Now()
	for time.Now().Before(deadline) {
		n := total()
		if n >= want {
			return
		}
		if n != last {
			last, quietSince = n, time.Now()
		} else if time.Since(quietSince) > 2*time.Second {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// AssertClean logs fig and fails t unless it shows what every fault test
// requires: something published, every loss inside a reported window, no
// duplicate, every reordering reported.
func AssertClean(t testing.TB, fig FaultFigures) {
	t.Helper()
	t.Logf("figures: %v", fig)
	for _, s := range fig.Samples {
		t.Log("  ", s)
	}
	if fig.Published == 0 {
		t.Error("nothing was published")
	}
	if fig.LostSilent != 0 {
		t.Errorf("%d messages lost outside every reported window", fig.LostSilent)
	}
	if fig.Duplicates != 0 {
		t.Errorf("%d duplicates", fig.Duplicates)
	}
	if fig.Reordered != fig.ReorderReported {
		t.Errorf("%d of %d reordered messages on channels no ErrRelayoutOrder event named", fig.Reordered-fig.ReorderReported, fig.Reordered)
	}
}
