package brokertest

import (
	"fmt"
	"slices"

	"github.com/shardcast/shardcast"
)

// checkInterruptedThenRestored: when the servers drop every subscribe
// connection, the broker raises EventInterrupted and then EventRestored,
// together naming exactly the subscribed channels, each channel's
// interruption before its restoration, and delivery resumes.
func checkInterruptedThenRestored(t T, h Harness) {
	if h.KillSubscribers == nil {
		t.Skipf("Harness.KillSubscribers is nil")
	}
	r := newRig(t, h, shardcast.Options{})
	chans := names("kill:", 200)
	r.subscribe(chans...)
	r.stillSubscribed(chans, "before the kill")
	mark := r.events.Len()

	h.KillSubscribers(t)
	waitFor(t, h, "EventRestored naming every subscribed channel", func() (bool, string) {
		restored := named(r.events.Since(mark), shardcast.EventRestored)
		var missing []string
		for _, ch := range chans {
			if _, ok := restored[ch]; !ok {
				missing = append(missing, ch)
			}
		}
		return len(missing) == 0, fmt.Sprintf("%d of %d channels not yet named by EventRestored, e.g. %s; events so far: %v",
			len(missing), len(chans), list(missing), r.events.Since(mark))
	})
	evs := r.events.Since(mark)
	interrupted := named(evs, shardcast.EventInterrupted)
	restored := named(evs, shardcast.EventRestored)
	var notFirst []string
	for _, ch := range chans {
		i, ok := interrupted[ch]
		if !ok || i > restored[ch] {
			notFirst = append(notFirst, ch)
		}
	}
	if len(notFirst) > 0 {
		t.Errorf("%d of %d channels were restored without an EventInterrupted naming them first, e.g. %s",
			len(notFirst), len(chans), list(notFirst))
	}
	for _, kind := range []shardcast.EventKind{shardcast.EventInterrupted, shardcast.EventRestored} {
		var extra []string
		for ch := range named(evs, kind) {
			if !slices.Contains(chans, ch) {
				extra = append(extra, ch)
			}
		}
		if len(extra) > 0 {
			t.Errorf("%v events name channels that were never subscribed: %s", kind, list(extra))
		}
	}
	for _, ev := range evs {
		switch {
		case ev.Kind == shardcast.EventInterrupted && ev.Since.IsZero():
			t.Errorf("EventInterrupted without Since: %v", ev)
		case ev.Kind == shardcast.EventRestored && (ev.Since.IsZero() || ev.Until.Before(ev.Since)):
			t.Errorf("EventRestored with a bad window (Since %v, Until %v): %v", ev.Since, ev.Until, ev)
		}
	}
	r.stillSubscribed(chans, "after the restore")
}

// named maps every channel named by events of kind to the index of the
// first such event.
func named(evs []shardcast.Event, kind shardcast.EventKind) map[string]int {
	out := make(map[string]int)
	for i, ev := range evs {
		if ev.Kind != kind {
			continue
		}
		for _, ch := range ev.Channels {
			if _, ok := out[ch]; !ok {
				out[ch] = i
			}
		}
	}
	return out
}
