package brokertest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
)

// SeqChecker is a Handler that checks, per channel and publisher, that
// sequence numbers ("<publisher>:<seq>" payloads) arrive once and in
// order.
type SeqChecker struct {
	mu    sync.Mutex
	last  map[string]int      // channel + "|" + publisher → last seq
	first map[string]int      // and the first
	got   map[string]int      // distinct messages taken per channel|publisher
	seen  map[string][]uint64 // the seqs taken, as a bitset
	// received counts every message, dup those seen before, reorders
	// those older than one taken before (received, not lost).
	received, dup, reorders int
}

// NewSeqChecker returns an empty checker.
func NewSeqChecker() *SeqChecker {
	return &SeqChecker{last: map[string]int{}, first: map[string]int{}, got: map[string]int{}, seen: map[string][]uint64{}}
}

// Handle is the Handler.
func (c *SeqChecker) Handle(m shardcast.Message) {
	pub, seqs, ok := strings.Cut(string(m.Payload), ":")
	if !ok {
		return
	}
	seq, _ := strconv.Atoi(seqs)
	k := m.Channel + "|" + pub
	c.mu.Lock()
	defer c.mu.Unlock()
	c.received++
	bits := c.seen[k]
	for len(bits) <= seq/64 {
		bits = append(bits, 0)
	}
	c.seen[k] = bits
	if bits[seq/64]&(1<<(seq%64)) != 0 {
		c.dup++
		return
	}
	bits[seq/64] |= 1 << (seq % 64)
	c.got[k]++
	last, ok := c.last[k]
	switch {
	case ok && seq < last:
		c.reorders++
		if seq < c.first[k] {
			c.first[k] = seq
		}
		return
	case !ok:
		c.first[k] = seq
	}
	c.last[k] = seq
}

// PublisherLoad publishes to every channel in turn, numbering each
// channel's messages, until stopped.
type PublisherLoad struct {
	// Name is the publisher's part of each payload.
	Name string
	mu   sync.Mutex
	sent map[string]int // channel|publisher → accepted publishes
	errs int
}

// Run publishes through b until stop closes, pausing for pause after each
// publish (none when zero).
func (p *PublisherLoad) Run(b shardcast.Broker, channels []string, pause time.Duration, stop <-chan struct{}) {
	seq := make(map[string]int)
	for {
		for _, ch := range channels {
			select {
			case <-stop:
				return
			default:
			}
			seq[ch]++
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := b.Publish(ctx, ch, []byte(p.Name+":"+strconv.Itoa(seq[ch])))
			cancel()
			p.mu.Lock()
			if err != nil {
				p.errs++
			} else {
				p.sent[ch+"|"+p.Name]++
			}
			p.mu.Unlock()
			if pause > 0 {
				time.Sleep(pause)
			}
		}
	}
}

// Counts are one subscriber's figures at the end of a re-layout test.
type Counts struct{ Published, Received, Lost, Dup, Reordered int }

// String formats c for a test log.
func (c Counts) String() string {
	return fmt.Sprintf("published %d, received %d, lost %d, duplicates %d, reordered %d",
		c.Published, c.Received, c.Lost, c.Dup, c.Reordered)
}

// CheckCounts logs each subscriber's figures and fails t on a loss or a
// duplicate, and on a reordering unless reorderOK.
func CheckCounts(t testing.TB, counts []Counts, reorderOK bool) {
	t.Helper()
	for i, c := range counts {
		t.Logf("subscriber %d: %v", i, c)
		if c.Lost != 0 {
			t.Errorf("subscriber %d lost %d messages", i, c.Lost)
		}
		if c.Dup != 0 {
			t.Errorf("subscriber %d got %d duplicates", i, c.Dup)
		}
		if c.Reordered != 0 && !reorderOK {
			t.Errorf("subscriber %d got %d messages out of order", i, c.Reordered)
		}
	}
}

// RelayoutFleet is brokers that subscribe every channel and publish to
// all of them while a re-layout runs.
type RelayoutFleet struct {
	t        *testing.T
	channels []string
	// Brokers, Checkers, Events and Pubs are per broker, in start order.
	Brokers  []shardcast.Broker
	Checkers []*SeqChecker
	Events   []*EventLog
	Pubs     []*PublisherLoad
	opts     FleetOptions
	late     []bool          // the broker subscribed after publishing began
	dead     map[string]bool // publishers closed mid-way: not counted
	started  bool
	stop     chan struct{}
	wg       sync.WaitGroup
}

// FleetOptions tune a RelayoutFleet's publishers.
type FleetOptions struct {
	// Split has broker i publish to channels i, i+n, … only, instead of
	// every channel, which keeps a large fleet's checkers small.
	Split bool
	// Pause is how long each publisher pauses after each publish (none
	// when zero), to keep a large fleet within what the host can deliver.
	Pause time.Duration
}

// NewRelayoutFleet starts n brokers made by start (given the Handler and
// the OnEvent hook to use), subscribes every channel on each, and starts
// a publisher on each.
func NewRelayoutFleet(t *testing.T, n int, channels []string, opts FleetOptions, start func(shardcast.Handler, func(shardcast.Event)) shardcast.Broker) *RelayoutFleet {
	f := &RelayoutFleet{t: t, channels: channels, opts: opts, stop: make(chan struct{}), dead: map[string]bool{}}
	for range n {
		f.Add(start)
	}
	f.started = true
	for i := range f.Brokers {
		f.startPublisher(i)
	}
	return f
}

func (f *RelayoutFleet) startPublisher(i int) {
	p, b, chans := f.Pubs[i], f.Brokers[i], f.channels
	if f.opts.Split {
		chans = nil
		for k := i % len(f.Brokers); k < len(f.channels); k += len(f.Brokers) {
			chans = append(chans, f.channels[k])
		}
	}
	f.wg.Go(func() { p.Run(b, chans, f.opts.Pause, f.stop) })
}

// Add starts one more broker, subscribes every channel on it and, once
// the fleet publishes, starts its publisher.
func (f *RelayoutFleet) Add(start func(shardcast.Handler, func(shardcast.Event)) shardcast.Broker) shardcast.Broker {
	chk, ev := NewSeqChecker(), &EventLog{}
	b := start(chk.Handle, ev.Add)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.Subscribe(ctx, f.channels...); err != nil {
		f.t.Fatalf("subscribe: %v", err)
	}
	p := &PublisherLoad{Name: fmt.Sprintf("p%d", len(f.Pubs)), sent: map[string]int{}}
	f.Brokers, f.Checkers, f.Events, f.Pubs = append(f.Brokers, b), append(f.Checkers, chk), append(f.Events, ev), append(f.Pubs, p)
	f.late = append(f.late, f.started)
	if f.started {
		f.startPublisher(len(f.Brokers) - 1)
	}
	return b
}

// Dead marks broker i's publisher as cut short (its broker closed
// mid-way): its messages are not counted, since Close may cut short a
// publish Redis took.
func (f *RelayoutFleet) Dead(i int) { f.dead[f.Pubs[i].Name] = true }

// Published returns the number of messages accepted so far.
func (f *RelayoutFleet) Published() int {
	n := 0
	for _, p := range f.Pubs {
		p.mu.Lock()
		for _, c := range p.sent {
			n += c
		}
		p.mu.Unlock()
	}
	return n
}

// WaitPublished waits until n more messages were published.
func (f *RelayoutFleet) WaitPublished(n int) {
	f.t.Helper()
	waitPublished(f.t, f.Published, n)
}

// Finish stops the publishers, waits (up to timeout) until every listed
// subscriber got every message it can still get, and returns its counts.
// A broker that subscribed late counts from the first message it got.
func (f *RelayoutFleet) Finish(live []int, timeout time.Duration) []Counts {
	close(f.stop)
	f.wg.Wait()
	want := map[string]int{}
	for _, p := range f.Pubs {
		if f.dead[p.Name] {
			continue
		}
		for k, n := range p.sent {
			want[k] = n
		}
	}
	count := func(i int) Counts {
		c := f.Checkers[i]
		c.mu.Lock()
		defer c.mu.Unlock()
		fc := Counts{Received: c.received, Dup: c.dup, Reordered: c.reorders}
		for k, n := range want {
			from := 1
			if f.late[i] {
				if first, ok := c.first[k]; ok {
					from = first
				} else {
					from = n + 1
				}
			}
			fc.Published += n - from + 1
			fc.Lost += n - from + 1 - c.got[k]
		}
		return fc
	}
	deadline := time.Now().Add(timeout)
	for _, i := range live {
		for count(i).Lost > 0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
	}
	out := make([]Counts, len(live))
	for k, i := range live {
		out[k] = count(i)
	}
	return out
}
