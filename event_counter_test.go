package shardcast_test

import (
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/shardcast/shardcast"
)

// TestEventKindsListsEveryNamedKind: EventKinds lists each kind that has a
// name, in order, so an exporter reports every one from the start; a kind
// added without being listed fails here (the value after the last listed
// one would have a name).
func TestEventKindsListsEveryNamedKind(t *testing.T) {
	kinds := shardcast.EventKinds()
	for i, k := range kinds {
		if k != shardcast.EventKind(i+1) {
			t.Errorf("EventKinds()[%d] = %v, want value %d", i, k, i+1)
		}
		if strings.HasPrefix(k.String(), "EventKind(") {
			t.Errorf("listed kind %d has no name", int(k))
		}
	}
	if next := shardcast.EventKind(len(kinds) + 1); !strings.HasPrefix(next.String(), "EventKind(") {
		t.Errorf("kind %d is named %q but not in EventKinds", int(next), next)
	}
}

// TestEventCounterCounts: every listed kind is counted from 0, a kind the
// package does not name is counted after them in order of value, and
// Chain counts before it passes the event on.
func TestEventCounterCounts(t *testing.T) {
	var c shardcast.EventCounter
	var passed []shardcast.EventKind
	hook := c.Chain(func(ev shardcast.Event) { passed = append(passed, ev.Kind) })
	for _, k := range []shardcast.EventKind{shardcast.EventRestored, 42, shardcast.EventRestored, 40, shardcast.EventError} {
		hook(shardcast.Event{Kind: k})
	}
	c.OnEvent(shardcast.Event{Kind: shardcast.EventInterrupted})
	if !slices.Equal(passed, []shardcast.EventKind{shardcast.EventRestored, 42, shardcast.EventRestored, 40, shardcast.EventError}) {
		t.Errorf("Chain passed %v", passed)
	}
	got := c.Counts()
	want := map[shardcast.EventKind]uint64{shardcast.EventInterrupted: 1, shardcast.EventRestored: 2, shardcast.EventError: 1, 40: 1, 42: 1}
	kinds := shardcast.EventKinds()
	if len(got) != len(kinds)+2 {
		t.Fatalf("Counts() = %v, want the %d listed kinds and 2 others", got, len(kinds))
	}
	for i, e := range got {
		wantKind := shardcast.EventKind(40 + 2*(i-len(kinds)))
		if i < len(kinds) {
			wantKind = kinds[i]
		}
		if e.Kind != wantKind || e.Count != want[e.Kind] {
			t.Errorf("Counts()[%d] = %v %d, want %v %d", i, e.Kind, e.Count, wantKind, want[wantKind])
		}
	}
	var zero shardcast.EventCounter
	for _, e := range zero.Counts() {
		if e.Count != 0 {
			t.Errorf("a zero EventCounter counts %v", e)
		}
	}
	if hook := c.Chain(nil); hook != nil {
		hook(shardcast.Event{Kind: shardcast.EventDropped}) // nil next: counted, no call
	}
	if n := c.Counts()[2]; n.Kind != shardcast.EventDropped || n.Count != 1 {
		t.Errorf("Chain(nil) counted %v", n)
	}
}

// TestEventCounterConcurrent: brokers emit from their own goroutines.
func TestEventCounterConcurrent(t *testing.T) {
	var c shardcast.EventCounter
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 1000 {
				c.OnEvent(shardcast.Event{Kind: shardcast.EventDropped})
				_ = c.Counts()
			}
		})
	}
	wg.Wait()
	if n := c.Counts()[2].Count; n != 8000 {
		t.Errorf("counted %d of 8000", n)
	}
}
