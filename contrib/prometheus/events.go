package shardcastprom

import (
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/shardcast/shardcast"
)

// Events counts a broker's events by kind, for shardcast_events_total.
// A broker takes its event hook in its Config, before a Collector over it
// can exist, so the count lives apart: create the Events first, hand its
// OnEvent (or Chain) to the broker's shardcast.Options.OnEvent, and pass it
// to NewCollector in Options.Events.
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

// knownKinds are exported from the start, at 0, so that a rate over them
// works before the first event of a kind.
var knownKinds = []shardcast.EventKind{
	shardcast.EventInterrupted,
	shardcast.EventRestored,
	shardcast.EventDropped,
	shardcast.EventTopologyChanged,
	shardcast.EventError,
	shardcast.EventHotChannel,
	shardcast.EventRelayout,
}

func (e *Events) collect(ch chan<- prometheus.Metric, desc *prometheus.Desc) {
	e.mu.Lock()
	kinds := slices.Clone(knownKinds)
	for k := range e.counts {
		if !slices.Contains(kinds, k) {
			kinds = append(kinds, k)
		}
	}
	counts := make([]uint64, len(kinds))
	for i, k := range kinds {
		counts[i] = e.counts[k]
	}
	e.mu.Unlock()
	for i, k := range kinds {
		ch <- constMetric(desc, prometheus.CounterValue, float64(counts[i]), k.String())
	}
}
