package relayout

import (
	"strings"

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
	if engine.IsBarrier(channel) {
		// A late barrier of a re-layout the broker left (the coordinator
		// resends them until every broker drained), or an earlier one's:
		// never the Handler's.
		return
	}
	if barrier != "" && !strings.HasPrefix(channel, engine.ProbeChannelPrefix) {
		if old, ok := oldPath(channel); ok && h.Hold(old, l, p, channel, payload) {
			return
		}
	}
	h.core.DeliverFrom(l, p, channel, payload)
}
