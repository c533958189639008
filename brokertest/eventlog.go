package brokertest

import (
	"slices"
	"sync"

	"github.com/shardcast/shardcast"
)

// EventLog keeps every event a broker raised, in order. Its Add is an
// OnEvent hook; the zero value is ready to use, and it is safe for
// concurrent use.
type EventLog struct {
	mu  sync.Mutex
	all []shardcast.Event
}

// Add records ev (with a copy of its Channels).
func (l *EventLog) Add(ev shardcast.Event) {
	ev.Channels = append([]string(nil), ev.Channels...)
	l.mu.Lock()
	l.all = append(l.all, ev)
	l.mu.Unlock()
}

// All returns every event recorded so far.
func (l *EventLog) All() []shardcast.Event { return l.Since(0) }

// Since returns the events raised after the first n.
func (l *EventLog) Since(n int) []shardcast.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	n = min(n, len(l.all))
	return append([]shardcast.Event(nil), l.all[n:]...)
}

// Of returns the events of one kind, in the order raised.
func (l *EventLog) Of(kind shardcast.EventKind) []shardcast.Event {
	var out []shardcast.Event
	for _, ev := range l.All() {
		if ev.Kind == kind {
			out = append(out, ev)
		}
	}
	return out
}

// Len returns how many events were raised so far.
func (l *EventLog) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.all)
}

// RelayoutPhases returns the phases of the EventRelayout events l holds,
// in order.
func (l *EventLog) RelayoutPhases() []string {
	var out []string
	for _, e := range l.Of(shardcast.EventRelayout) {
		out = append(out, e.Phase)
	}
	return out
}

// Unrestored returns the channels whose last EventInterrupted in the log
// was not followed by an EventRestored naming them: channels the broker
// told the application it is losing and never told it are back.
func (l *EventLog) Unrestored() []string {
	open := map[string]bool{}
	for _, ev := range l.All() {
		switch ev.Kind {
		case shardcast.EventInterrupted:
			for _, ch := range ev.Channels {
				open[ch] = true
			}
		case shardcast.EventRestored:
			for _, ch := range ev.Channels {
				delete(open, ch)
			}
		}
	}
	out := make([]string, 0, len(open))
	for ch := range open {
		out = append(out, ch)
	}
	slices.Sort(out)
	return out
}
