package brokertest

import (
	"sync"

	"github.com/shardcast/shardcast"
)

// EventCounts counts the events a broker raises, and the channels they
// name, by kind, without keeping the channel lists: for tests of brokers
// with very many channels, where copies of the lists would dwarf what is
// measured. Its Add is an OnEvent hook; the zero value is ready to use,
// and it is safe for concurrent use.
type EventCounts struct {
	mu     sync.Mutex
	byKind map[shardcast.EventKind]KindCount
}

// KindCount is how many events of one kind were raised, and how many
// channels they named in all.
type KindCount struct{ Events, Channels int }

// Add counts ev.
func (e *EventCounts) Add(ev shardcast.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.byKind == nil {
		e.byKind = make(map[shardcast.EventKind]KindCount)
	}
	c := e.byKind[ev.Kind]
	c.Events++
	c.Channels += len(ev.Channels)
	e.byKind[ev.Kind] = c
}

// Of returns the count of kind so far.
func (e *EventCounts) Of(kind shardcast.EventKind) KindCount {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.byKind[kind]
}
