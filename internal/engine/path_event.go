package engine

import (
	"strings"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/layoutkey"
)

// Besides the application's channels, a path may want the engine's own: a
// re-layout subscribes its barrier (layoutkey.Barrier) on
// the old layout's paths and drops it at the finish. The events that
// report paths name the application's channels only: the application never
// subscribed the others, and would wait forever for the Restored of a
// barrier dropped while its path was down.

// barrierInfix is in the name of every re-layout's barrier channel,
// whatever the application.
var barrierInfix = layoutkey.Barrier(shardcast.Agreement{}, "")

// IsBarrier reports whether channel is a re-layout's barrier. On the
// cluster engine a barrier's key may read as a channel of another prefix
// (an old prefix followed by the barrier's name under a new one that
// extends it), hence Contains: the infix is reserved for the agreement
// whatever comes before it.
func IsBarrier(channel string) bool {
	return strings.Contains(channel, barrierInfix)
}

// appChannels returns chans without the engine's own channels: chans
// itself when it holds none, which is every path's case outside a
// re-layout.
func appChannels(chans []string) []string {
	i := 0
	for i < len(chans) && !IsBarrier(chans[i]) {
		i++
	}
	if i == len(chans) {
		return chans
	}
	out := append(make([]string, 0, len(chans)-1), chans[:i]...)
	for _, ch := range chans[i+1:] {
		if !IsBarrier(ch) {
			out = append(out, ch)
		}
	}
	return out
}

// concat joins lists into one slice, allocated once: the channels of a
// wire that carried a million of them would otherwise be copied again
// at every doubling of an appended slice.
func concat(lists [][]string) []string {
	n := 0
	for _, l := range lists {
		n += len(l)
	}
	if n == 0 {
		return nil
	}
	out := make([]string, 0, n)
	for _, l := range lists {
		out = append(out, l...)
	}
	return out
}
