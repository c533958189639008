package brokertest

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
)

// FaultFleet is brokers that each subscribe every channel and publish
// numbered messages to all of them while a re-layout runs and faults
// strike; Finish checks every message with CheckMessages.
type FaultFleet struct {
	t *testing.T
	// Brokers, Subs and Events are per broker, in start order; Pubs holds
	// broker i's publishers at i*Publishers … (i+1)*Publishers-1.
	Brokers []shardcast.Broker
	Subs    []*DeliveryLog
	Events  []*EventLog
	Pubs    []*LoggedPublisher
	stop    chan struct{}
	once    sync.Once
	wg      sync.WaitGroup
}

// FaultFleetOptions tune a FaultFleet's publishers.
type FaultFleetOptions struct {
	// Publishers is how many goroutines of each broker publish, each to
	// its own share of the channels under a publisher name of its own
	// (default 1: every channel in turn).
	Publishers int
	// Timeout bounds each Publish call (default 2 s).
	Timeout time.Duration
}

// NewFaultFleet starts n brokers made by start (given the Handler and the
// OnEvent hook to use), subscribes every channel on each, and starts the
// publishers of each.
func NewFaultFleet(t *testing.T, n int, channels []string, opts FaultFleetOptions, start func(shardcast.Handler, func(shardcast.Event)) shardcast.Broker) *FaultFleet {
	if opts.Publishers == 0 {
		opts.Publishers = 1
	}
	if opts.Timeout == 0 {
		opts.Timeout = 2 * time.Second
	}
	f := &FaultFleet{t: t, stop: make(chan struct{})}
	for range n {
		sub, ev := NewDeliveryLog(), &EventLog{}
		b := start(sub.Handle, ev.Add)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := b.Subscribe(ctx, channels...)
		cancel()
		if err != nil {
			t.Fatalf("subscribe: %v", err)
		}
		f.Brokers, f.Subs, f.Events = append(f.Brokers, b), append(f.Subs, sub), append(f.Events, ev)
	}
	for i, b := range f.Brokers {
		for g := range opts.Publishers {
			name := "p" + strconv.Itoa(i)
			if g > 0 {
				name += "." + strconv.Itoa(g)
			}
			p := NewLoggedPublisher(name)
			f.Pubs = append(f.Pubs, p)
			var share []string
			for k := g; k < len(channels); k += opts.Publishers {
				share = append(share, channels[k])
			}
			f.wg.Go(func() { p.Run(b, share, f.stop, opts.Timeout) })
		}
	}
	// Before the brokers close (cleanups run last first), should the test
	// end before Finish.
	t.Cleanup(f.halt)
	return f
}

// halt stops the publishers and waits for them.
func (f *FaultFleet) halt() {
	f.once.Do(func() { close(f.stop) })
	f.wg.Wait()
}

// Published returns how many publishes were accepted so far.
func (f *FaultFleet) Published() int64 {
	var n int64
	for _, p := range f.Pubs {
		n += p.Accepted()
	}
	return n
}

// WaitPublished waits (up to 30 s, else it fails the test) until n more
// publishes were accepted.
func (f *FaultFleet) WaitPublished(n int64) {
	f.t.Helper()
	waitPublished(f.t, f.Published, n)
}

// waitPublished waits (up to 30 s, else it fails the test) until
// published has grown by n.
func waitPublished[N int | int64](t *testing.T, published func() N, n N) {
	t.Helper()
	target := published() + n
	deadline := time.Now().Add(30 * time.Second)
	for published() < target {
		if time.Now().After(deadline) {
			t.Fatalf("%d messages were not published within 30s", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Finish stops the publishers, waits until every subscriber got every
// accepted message or nothing more arrives for a while, and checks every
// message (tol as in CheckMessages).
func (f *FaultFleet) Finish(tol time.Duration) FaultFigures {
	f.halt()
	WaitDelivered(f.Subs, int(f.Published())*len(f.Subs), DefaultTimeout)
	return CheckMessages(f.Pubs, f.Subs, f.Events, nil, tol)
}

// FinishClean is Finish, then LogEvents, AssertClean, and a check that
// every broker restored each channel it reported interrupted: the close of
// a fault test that expects every fault healed.
func (f *FaultFleet) FinishClean(tol time.Duration) FaultFigures {
	f.t.Helper()
	fig := f.Finish(tol)
	f.LogEvents()
	AssertClean(f.t, fig)
	for i, ev := range f.Events {
		if u := ev.Unrestored(); len(u) > 0 {
			f.t.Errorf("broker %d: channels reported interrupted and never restored: %v", i, u)
		}
	}
	return fig
}

// ReportedPhase reports whether some broker raised an EventRelayout of
// phase.
func (f *FaultFleet) ReportedPhase(phase string) bool {
	for _, ev := range f.Events {
		for _, e := range ev.Of(shardcast.EventRelayout) {
			if e.Phase == phase {
				return true
			}
		}
	}
	return false
}

// Delivering reports whether every broker has received, on each channel
// every publisher publishes to, a message that publisher began to publish
// at or after t: delivery resumed everywhere after a fault at t.
func (f *FaultFleet) Delivering(t time.Time) bool {
	for _, p := range f.Pubs {
		before := p.SentBefore(t)
		for ch, n := range before {
			for _, s := range f.Subs {
				if s.Highest(ch, p.Name) <= n {
					return false
				}
			}
		}
	}
	return true
}

// Interrupted counts the EventInterrupted the brokers raised.
func (f *FaultFleet) Interrupted() int {
	n := 0
	for _, ev := range f.Events {
		n += len(ev.Of(shardcast.EventInterrupted))
	}
	return n
}

// LogEvents logs, per broker, its re-layout phases and how many
// interruptions, restorations and drops it reported.
func (f *FaultFleet) LogEvents() {
	for i, ev := range f.Events {
		f.t.Logf("broker %d: re-layout events %v; %s", i, ev.RelayoutPhases(), countKinds(ev,
			shardcast.EventInterrupted, shardcast.EventRestored, shardcast.EventDropped, shardcast.EventError))
	}
}

func countKinds(ev *EventLog, kinds ...shardcast.EventKind) string {
	out := ""
	for i, k := range kinds {
		if i > 0 {
			out += ", "
		}
		out += fmt.Sprintf("%d %v", len(ev.Of(k)), k)
	}
	return out
}
