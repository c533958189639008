package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/shardcast/shardcast"
)

// broker is what the soak needs of either engine.
type broker interface {
	shardcast.Broker
	Stats() shardcast.Stats
	Fingerprint() string
}

// chanLog is everything the soak knows about one channel: each numbered
// publish (sequence numbers start at 1, index seq-1) and each delivery.
type chanLog struct {
	mu sync.Mutex
	// start and end bracket each Publish call (unix ns): Redis ran the
	// command, if it did, somewhere in between.
	start, end []int64
	failed     []bool // Publish returned an error: may or may not arrive
	recv       []uint32
	recvAt     []int64 // unix ns of each delivery
}

// traffic publishes numbered messages and records what comes back.
type traffic struct {
	names []string
	index map[string]int
	logs  []*chanLog

	stop chan struct{}
	wg   sync.WaitGroup

	timeout time.Duration
	mu      sync.Mutex
	badRecv int      // deliveries of unknown channels or unparsable payloads
	badSeen []string // the first few of them, as channel=payload
}

func newTraffic(channels int, publishTimeout time.Duration) *traffic {
	t := &traffic{index: make(map[string]int, channels), timeout: publishTimeout}
	for i := range channels {
		name := fmt.Sprintf("chaos.%04d", i)
		t.names = append(t.names, name)
		t.index[name] = i
		t.logs = append(t.logs, &chanLog{})
	}
	return t
}

// handle is the subscribing broker's Handler.
func (t *traffic) handle(m shardcast.Message) {
	i, ok := t.index[m.Channel]
	seq, err := strconv.ParseUint(string(m.Payload), 10, 32)
	if !ok || err != nil || seq == 0 {
		t.mu.Lock()
		t.badRecv++
		if len(t.badSeen) < 5 {
			t.badSeen = append(t.badSeen, fmt.Sprintf("%s=%.40q at %s", m.Channel, m.Payload, time.Now().Format(clock)))
		}
		t.mu.Unlock()
		return
	}
	l := t.logs[i]
	l.mu.Lock()
	l.recv = append(l.recv, uint32(seq))
	l.recvAt = append(l.recvAt, time.Now().UnixNano())
	l.mu.Unlock()
}

// start runs publishers goroutines that together publish about rate
// messages per second, each owning a fixed set of channels so that one
// channel's publishes are sequential (the next starts after the last one
// returned): that is what makes per-channel order checkable. A publisher
// held up by a fault catches up at most 100 ms worth of messages.
func (t *traffic) start(pub broker, rate, publishers int) {
	t.stop = make(chan struct{})
	perSecond := float64(rate) / float64(publishers)
	for w := range publishers {
		var mine []int
		for i := w; i < len(t.names); i += publishers {
			mine = append(mine, i)
		}
		if len(mine) == 0 {
			continue
		}
		t.wg.Go(func() {
			tk := time.NewTicker(5 * time.Millisecond)
			defer tk.Stop()
			next, due := 0, 0.0
			last := time.Now()
			for {
				select {
				case <-t.stop:
					return
				case now := <-tk.C:
					due = min(due+now.Sub(last).Seconds()*perSecond, perSecond/10)
					last = now
				}
				for ; due >= 1; due-- {
					t.publish(pub, mine[next%len(mine)])
					next++
				}
			}
		})
	}
}

// halt stops the publishers and waits for them.
func (t *traffic) halt() {
	close(t.stop)
	t.wg.Wait()
}

// publish sends the next sequence number of channel i and records the
// outcome. It reports whether Publish returned nil.
func (t *traffic) publish(pub broker, i int) bool {
	l := t.logs[i]
	l.mu.Lock()
	seq := len(l.start) + 1
	l.start = append(l.start, time.Now().UnixNano())
	l.end = append(l.end, 0)
	l.failed = append(l.failed, false)
	l.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), t.timeout)
	err := pub.Publish(ctx, t.names[i], []byte(strconv.Itoa(seq)))
	cancel()
	l.mu.Lock()
	l.end[seq-1] = time.Now().UnixNano()
	l.failed[seq-1] = err != nil
	l.mu.Unlock()
	return err == nil
}

// lastAcked returns the highest sequence number of channel i whose Publish
// succeeded (0 if none), and whether it was delivered.
func (t *traffic) lastAcked(i int) (uint32, bool) {
	l := t.logs[i]
	l.mu.Lock()
	defer l.mu.Unlock()
	for s := len(l.failed); s > 0; s-- {
		if !l.failed[s-1] {
			for j := len(l.recv) - 1; j >= 0; j-- {
				if l.recv[j] == uint32(s) {
					return uint32(s), true
				}
			}
			return uint32(s), false
		}
	}
	return 0, false
}

// probe publishes on every channel until one publish per channel is
// acknowledged (at most tries attempts each), so that the end check can
// ask every channel for a fresh delivery.
func (t *traffic) probe(pub broker, tries int) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for i := range t.names {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			for range tries {
				if t.publish(pub, i) {
					return
				}
				time.Sleep(200 * time.Millisecond)
			}
		})
	}
	wg.Wait()
}

// waitDelivered waits until every channel has delivered its last
// acknowledged publish, or until the deadline; it returns the channels that
// have not.
func (t *traffic) waitDelivered(timeout time.Duration) []string {
	deadline := time.Now().Add(timeout)
	for {
		var dead []string
		for i, name := range t.names {
			if s, ok := t.lastAcked(i); s == 0 || !ok {
				dead = append(dead, name)
			}
		}
		if len(dead) == 0 || time.Now().After(deadline) {
			return dead
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// eventLog keeps every Event the subscribing broker raised.
type eventLog struct {
	mu  sync.Mutex
	all []shardcast.Event
	at  []time.Time // when each arrived
	// verbose prints each event as it comes.
	verbose bool
}

func (e *eventLog) add(ev shardcast.Event) {
	e.mu.Lock()
	e.all = append(e.all, ev)
	e.at = append(e.at, time.Now())
	e.mu.Unlock()
	if e.verbose {
		logf("event: %s", formatEvent(ev))
	}
}

func (e *eventLog) snapshot() []shardcast.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]shardcast.Event(nil), e.all...)
}

// dump writes every event, one a line, with the time it arrived.
func (e *eventLog) dump(w io.Writer) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for i, ev := range e.all {
		fmt.Fprintf(w, "%s %s\n", e.at[i].Format(clock), formatEvent(ev))
	}
}

const clock = "15:04:05.000000"

// formatEvent renders an event with its window in wall-clock time, which
// Event.String leaves out.
func formatEvent(ev shardcast.Event) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s shard=%s", ev.Kind, ev.Shard)
	if !ev.Since.IsZero() {
		fmt.Fprintf(&b, " since=%s", ev.Since.Format(clock))
	}
	if !ev.Until.IsZero() {
		fmt.Fprintf(&b, " until=%s", ev.Until.Format(clock))
	}
	if len(ev.Partitions) > 0 {
		fmt.Fprintf(&b, " partitions=%v", ev.Partitions)
	}
	fmt.Fprintf(&b, " channels=%d", len(ev.Channels))
	if ev.Count > 0 {
		fmt.Fprintf(&b, " count=%d", ev.Count)
	}
	if ev.Err != nil {
		fmt.Fprintf(&b, " err=%v", ev.Err)
	}
	return b.String()
}
