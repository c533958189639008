package relayout

import (
	"strings"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/engine"
)

// Deliver hands a message that arrived on link l for path p to the core,
// but for what a re-layout does with it: the barrier of the re-layout
// under way (barrier, "" when none is) marks p drained; any other barrier
// is dropped; and a moving channel's message that came under the new
// layout is held until its path under the old layout (oldPath's answer,
// ok false for any other message) drained. A delivery probe is never
// held: it tests its path, whatever the layout, and held it would make
// the path look silent.
func (h *Handover) Deliver(l *engine.Link, p int, channel string, payload []byte, barrier string, oldPath func(channel string) (old int, ok bool)) {
	if barrier != "" && channel == barrier {
		h.Barrier(p)
		return
	}
	if isBarrier(channel) {
		return // a late barrier of a re-layout the broker left, or an earlier one's
	}
	if barrier != "" && !strings.HasPrefix(channel, engine.ProbeChannelPrefix) {
		if old, ok := oldPath(channel); ok && h.Hold(old, l, p, channel, payload) {
			return
		}
	}
	h.core.DeliverFrom(l, p, channel, payload)
}

// barrierInfix is in the name of every re-layout's barrier channel,
// whatever the application (shardcast.Agreement.BarrierChannel).
var barrierInfix = shardcast.Agreement{}.BarrierChannel("")

// isBarrier reports whether a message's channel is a re-layout's barrier.
// A barrier that arrives once the broker has left the re-layout (the
// coordinator resends them until every broker drained, and the old
// subscriptions go only at the finish) must not reach the Handler. On the
// cluster engine the barrier's key may then read as channel old prefix +
// barrier name under a new prefix it extends (""), hence Contains: the
// infix is reserved for the agreement whatever comes before it.
func isBarrier(channel string) bool {
	return strings.Contains(channel, barrierInfix)
}
