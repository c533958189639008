package relayout

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/engine"
)

// DefaultHandoverLimit is the default bound of the messages a broker holds
// back during a re-layout (the engines' Config.HandoverLimit).
const DefaultHandoverLimit = 1 << 16

// Handover holds back, during a re-layout, the messages of moving
// channels that arrive under the new layout, until the old layout has
// drained for them: the coordinator's barrier arrived on the subscribe
// connection (path) that carries them under the old one. Redis delivers in
// order on one connection, and no broker publishes a moving channel under
// the old layout once the barrier is sent, so what arrived before the
// barrier is every old message; the held ones come after it, in their
// arrival order. Paths with no barrier to wait for deliver at once.
type Handover struct {
	core  *engine.Core
	limit int

	mu sync.Mutex
	// held maps an old path to the messages waiting for its barrier;
	// need lists the paths that wait (closed ones are drained), n counts
	// held messages.
	held    map[int][]heldMessage
	need    map[int]bool
	drained map[int]bool
	n       int
	// peak is the most messages held at once since the broker started.
	peak int
	// done closes when every needed path drained.
	done chan struct{}
	// forced names the channels delivered without their barrier.
	forced map[string]bool
	// closed is set by Close: nothing is held any more.
	closed bool
}

type heldMessage struct {
	l       *engine.Link
	path    int
	channel string
	payload []byte
	arrived time.Time // a drop at its release is reported from then
}

// NewHandover returns a hand-over with nothing to wait for; limit bounds
// the messages it holds (DefaultHandoverLimit when 0).
func NewHandover(core *engine.Core, limit int) *Handover {
	if limit == 0 {
		limit = DefaultHandoverLimit
	}
	h := &Handover{core: core, limit: limit}
	h.Reset(nil)
	h.closeDone()
	return h
}

// Reset starts a hand-over that waits for a barrier on each path of need.
func (h *Handover) Reset(need []int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.held = make(map[int][]heldMessage)
	h.need = make(map[int]bool, len(need))
	h.drained = make(map[int]bool, len(need))
	h.forced = nil
	h.n = 0
	h.done = make(chan struct{})
	for _, p := range need {
		h.need[p] = true
	}
	if len(need) == 0 {
		close(h.done)
	}
}

func (h *Handover) closeDone() {
	select {
	case <-h.done:
	default:
		close(h.done)
	}
}

// Hold keeps a message that arrived on link l for path p until old path
// from drained, and reports true; false means from already drained: the
// caller delivers it now. A full buffer first hands over from's messages
// without waiting (raising an event).
func (h *Handover) Hold(from int, l *engine.Link, p int, channel string, payload []byte) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed || !h.need[from] || h.drained[from] {
		return false
	}
	if h.n >= h.limit {
		h.releaseLocked(from, true)
		h.core.Emitter.Emit(h.eventLocked(shardcast.PhaseHandoverFull, from))
		return false
	}
	// channel and payload are views of the reader's buffer: keep copies.
	h.held[from] = append(h.held[from], heldMessage{l: l, path: p, channel: strings.Clone(channel), payload: append([]byte(nil), payload...), arrived: time.Now()})
	h.n++
	h.peak = max(h.peak, h.n)
	return true
}

// Close delivers, at the broker's Close, what is still held, path by
// path in arrival order, and holds nothing after. The caller has stopped
// the subscribe connections first: no message can arrive behind these any
// more, so they are handed over without their barriers (an old message
// still in flight is lost to Close like any other). The worker pool,
// still open, delivers them before it closes.
func (h *Handover) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	paths := make([]int, 0, len(h.held))
	for p := range h.held {
		paths = append(paths, p)
	}
	sort.Ints(paths)
	for _, p := range paths {
		h.releaseLocked(p, false)
	}
	h.closeDone()
}

// PeakHeld returns the most messages held at once since the broker
// started.
func (h *Handover) PeakHeld() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.peak
}

// Barrier records the barrier's arrival on old path p and delivers what
// waited for it.
func (h *Handover) Barrier(p int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.need[p] && !h.drained[p] {
		h.releaseLocked(p, false)
	}
}

// releaseLocked delivers path p's held messages in order and marks it
// drained; forced records their channels as handed over without their
// barrier. The caller holds h.mu, so that a message arriving meanwhile is
// held behind them or, once p is drained, delivered after them.
func (h *Handover) releaseLocked(p int, forced bool) {
	for _, m := range h.held[p] {
		h.core.DeliverHeld(m.l, m.path, m.channel, m.payload, m.arrived)
		if forced {
			if h.forced == nil {
				h.forced = make(map[string]bool)
			}
			h.forced[m.channel] = true
		}
	}
	h.n -= len(h.held[p])
	delete(h.held, p)
	h.drained[p] = true
	if len(h.drained) == len(h.need) {
		h.closeDone()
	}
}

// Force hands over every path still waiting and reports the channels it
// delivered without their barrier in an EventRelayout of phase (when it
// delivered any); it reports whether some path was still waiting.
func (h *Handover) Force(phase string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	waiting := h.waitingLocked()
	if len(waiting) == 0 {
		return false
	}
	for _, p := range waiting {
		h.releaseLocked(p, true)
	}
	if len(h.forced) > 0 {
		h.core.Emitter.Emit(h.eventLocked(phase, waiting...))
	}
	return true
}

// Stall hands over every path still waiting, as Force does, but only when
// some message is held, and reports phase PhaseStalled naming the channels
// of channels() besides the ones it delivered (a broker's moving channels:
// their order is no longer kept once it stops waiting). It reports whether
// it delivered anything.
func (h *Handover) Stall(channels func() []string) bool {
	h.mu.Lock()
	held := h.n
	h.mu.Unlock()
	if held == 0 {
		return false
	}
	names := channels() // outside h.mu: the engine takes its own locks
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n == 0 {
		return false
	}
	waiting := h.waitingLocked()
	for _, p := range waiting {
		h.releaseLocked(p, true)
	}
	if h.forced == nil {
		h.forced = make(map[string]bool)
	}
	for _, ch := range names {
		h.forced[ch] = true
	}
	h.core.Emitter.Emit(h.eventLocked(shardcast.PhaseStalled, waiting...))
	return true
}

// Waiting returns the paths still waiting for a barrier.
func (h *Handover) Waiting() []int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.waitingLocked()
}

// waitingLocked returns, sorted, the paths still waiting for a barrier.
func (h *Handover) waitingLocked() []int {
	var out []int
	for p := range h.need {
		if !h.drained[p] {
			out = append(out, p)
		}
	}
	sort.Ints(out)
	return out
}

// Done closes once every path drained.
func (h *Handover) Done() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.done
}

func (h *Handover) eventLocked(phase string, paths ...int) shardcast.Event {
	ev := shardcast.Event{Kind: shardcast.EventRelayout, Phase: phase, Since: time.Now(), Until: time.Now(),
		Err: fmt.Errorf("%w (subscribe paths %v)", shardcast.ErrRelayoutOrder, paths)}
	for ch := range h.forced {
		ev.Channels = append(ev.Channels, ch)
	}
	sort.Strings(ev.Channels)
	ev.Count = uint64(len(ev.Channels))
	h.forced = nil
	return ev
}
