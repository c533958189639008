package shardcast

import (
	"slices"
	"sync"
)

// EventKinds returns every kind of Event this package defines, in the
// order of their values: what an exporter reports from the start, at 0, so
// that a rate over a kind is defined before its first event.
func EventKinds() []EventKind {
	return []EventKind{EventInterrupted, EventRestored, EventDropped, EventTopologyChanged,
		EventError, EventHotChannel, EventRelayout}
}

// EventCounter counts a broker's events by kind, for a metrics exporter. A
// broker takes its event hook in its Options, before anything that reads
// the broker can exist, so the count lives apart: create the counter
// first, and hand its OnEvent (or Chain) to Options.OnEvent.
//
// The zero value is ready to use. An EventCounter must not be copied after
// first use.
type EventCounter struct {
	mu     sync.Mutex
	counts map[EventKind]uint64
}

// EventCount is how many events of one kind an EventCounter counted.
type EventCount struct {
	Kind  EventKind
	Count uint64
}

// OnEvent counts ev. Its signature is that of Options.OnEvent.
func (c *EventCounter) OnEvent(ev Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.counts == nil {
		c.counts = make(map[EventKind]uint64)
	}
	c.counts[ev.Kind]++
}

// Chain returns an event hook that counts each event and then passes it to
// next (if not nil), for an application that handles events itself:
//
//	opts.OnEvent = counter.Chain(app.onEvent)
func (c *EventCounter) Chain(next func(Event)) func(Event) {
	return func(ev Event) {
		c.OnEvent(ev)
		if next != nil {
			next(ev)
		}
	}
}

// Counts returns the count of every kind EventKinds lists, 0 for those not
// seen yet, then of every other kind seen (a newer broker's), in order of
// value.
func (c *EventCounter) Counts() []EventCount {
	known := EventKinds()
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]EventCount, 0, len(known)+len(c.counts))
	for _, k := range known {
		out = append(out, EventCount{k, c.counts[k]})
	}
	var others []EventKind
	for k := range c.counts {
		if !slices.Contains(known, k) {
			others = append(others, k)
		}
	}
	slices.Sort(others)
	for _, k := range others {
		out = append(out, EventCount{k, c.counts[k]})
	}
	return out
}
