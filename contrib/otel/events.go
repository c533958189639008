package shardcastotel

import (
	"slices"
	"sync"

	"github.com/shardcast/shardcast"
)

// Events counts a broker's events by kind, for shardcast.events. A broker
// takes its event hook in its Config, before the instruments over it can
// be registered, so the count lives apart: create the Events first, hand
// its OnEvent (or Chain) to the broker's shardcast.Options.OnEvent, and
// pass it to Register in Options.Events.
//
// The zero value is ready to use. An Events must not be copied after first
// use.
type Events struct {
	mu     sync.Mutex
	counts map[shardcast.EventKind]uint64
}

// OnEvent counts e. Its signature is that of shardcast.Options.OnEvent.
func (e *Events) OnEvent(ev shardcast.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.counts == nil {
		e.counts = make(map[shardcast.EventKind]uint64)
	}
	e.counts[ev.Kind]++
}

// Chain returns an event hook that counts each event and then passes it to
// next (if not nil), for an application that handles events itself:
//
//	cfg.Options.OnEvent = events.Chain(app.onEvent)
func (e *Events) Chain(next func(shardcast.Event)) func(shardcast.Event) {
	return func(ev shardcast.Event) {
		e.OnEvent(ev)
		if next != nil {
			next(ev)
		}
	}
}

// knownKinds are observed from the first collection on, at 0, so that a
// rate over them is defined before the first event of a kind.
var knownKinds = []shardcast.EventKind{
	shardcast.EventInterrupted,
	shardcast.EventRestored,
	shardcast.EventDropped,
	shardcast.EventTopologyChanged,
	shardcast.EventError,
	shardcast.EventHotChannel,
	shardcast.EventRelayout,
}

// eventCount is one kind's count.
type eventCount struct {
	kind  shardcast.EventKind
	count uint64
}

// snapshot returns the count of every known kind and of every other kind
// seen, known kinds first.
func (e *Events) snapshot() []eventCount {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]eventCount, 0, len(knownKinds)+len(e.counts))
	for _, k := range knownKinds {
		out = append(out, eventCount{k, e.counts[k]})
	}
	var others []shardcast.EventKind
	for k := range e.counts {
		if !slices.Contains(knownKinds, k) {
			others = append(others, k)
		}
	}
	slices.Sort(others)
	for _, k := range others {
		out = append(out, eventCount{k, e.counts[k]})
	}
	return out
}
