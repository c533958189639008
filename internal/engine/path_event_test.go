package engine

import (
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/events"
	"github.com/shardcast/shardcast/internal/layoutkey"
	"github.com/stretchr/testify/assert"
)

// TestEmitPathsLeavesOutOwnChannels: the events that report paths name
// the application's channels and partitions only; a path whose channels
// are all the engine's own is left out, and an event left with no path is
// not emitted.
func TestEmitPathsLeavesOutOwnChannels(t *testing.T) {
	barrier := layoutkey.Barrier(shardcast.Agreement{App: "app:"}, "r1")
	// A cluster's barrier key under a new prefix that extends the old.
	prefixed := "old:" + layoutkey.Barrier(shardcast.Agreement{}, "r2")
	for _, c := range []struct {
		name      string
		lists     [][]string
		want      []string // nil: no event
		wantParts []int
	}{
		{"application channels only", [][]string{{"a", "b"}, {"c"}}, []string{"a", "b", "c"}, []int{0, 1}},
		{"a barrier beside them", [][]string{{"a", barrier, "b"}, {prefixed, "c"}}, []string{"a", "b", "c"}, []int{0, 1}},
		{"a path with a barrier alone", [][]string{{"a"}, {barrier}}, []string{"a"}, []int{0}},
		{"barriers alone", [][]string{{barrier}, {prefixed, barrier}}, nil, nil},
		{"a path without channels", [][]string{{}, {barrier}}, []string{}, []int{0}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var got []shardcast.Event
			emitter := events.NewEmitter(func(ev shardcast.Event) { got = append(got, ev) }, nil)
			l := newLedger(emitter.Emit, func(p int) int { return p })
			paths := make([]*Path, len(c.lists))
			for i := range paths {
				paths[i] = newPath(i)
			}
			l.interrupted("node:6379", paths, c.lists, time.Now(), nil)
			emitter.Close()
			if c.want == nil {
				assert.Empty(t, got)
				return
			}
			if assert.Len(t, got, 1) {
				assert.ElementsMatch(t, c.want, got[0].Channels)
				assert.Equal(t, c.wantParts, got[0].Partitions)
			}
		})
	}
}
