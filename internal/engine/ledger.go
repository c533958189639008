package engine

import (
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/envelope"
)

// The ledger keeps the library's promise that every loss is an event with
// its window. The detectors (a link that lost its wire or stopped, a
// failed command, a server-pushed unsubscribe, a slot move, a probe that
// did not come back, an order fence or move fence that dropped a copy, an
// unsubscribe from an interrupted path) record facts: a path lost at a
// time with a cause, a path confirmed again, a path's spell ended by a
// probe, a message dropped as stale. The ledger alone keeps the windows
// (each path's window, below), dates the events from them, gathers and
// rate-limits them, and builds and emits every EventInterrupted,
// EventRestored and stale EventDropped of the engine.
//
// The rules that date a window, each with the test that pins it:
//
//   - A path's window opens at the earliest evidence of its loss and a
//     later fault does not move it (window.open): a lost wire dates from
//     its last proof of health, the answer to the last health PING, since
//     a server that drops a subscriber discards what it had queued for it
//     (TestOutputBufferDropDatesLoss, TestFrozenMasterWithSubscribesDatesLoss);
//     a relayed wire from its relay's (TestRelayedLinkDatesLossByItsRelay);
//     a stopped link from its wire's last proof (TestStoppedLinkReportsItsPaths).
//
//   - A server-pushed unsubscribe or a slot move voids a confirmation that
//     was in flight, so a window cannot be closed by a confirmation older
//     than the loss (TestActivateRefusesVoidedConfirmations,
//     TestSubscribeVoidedByPush, TestResubscribeOnOldNodeVoidedByMove).
//
//   - A window closes when every wanted channel of the path is confirmed
//     on a live wire; EventRestored spans from the earliest open window of
//     the paths it names to the moment it is built (window.close).
//
//   - On a relayed wire (a replica) a confirmation proves nothing about
//     delivery: the window becomes a silent spell, closed only by a probe
//     that comes back (TestRelayedRestoreWaitsForProbe).
//
//   - A spell a probe ended whose path is lost again before the Restored
//     went out carries its start into the new window, whose Restored then
//     covers both (window.carry, TestRestoreCarriedIntoNextLoss).
//
//   - Channels that leave an interrupted path (unsubscribed, or moved by a
//     re-layout) close their window as they leave: the path's own Restored
//     names only what it still wants (left; TestRelayoutAwayFromDeadInstance,
//     TestSubscribeWhileShardDown).
//
//   - The total a path spent interrupted never reads less than before,
//     whatever the wall clock does (TestInterruptedForNeverGoesBack).
//
//   - A stale drop is dated on the publishers' clocks, from the earliest to
//     the latest publish time of the dropped messages, widened by the
//     envelope's stamp resolution (TestStaleDropsReported,
//     TestOvertakenReported).
//
//   - Events name the application's channels only, and an event that would
//     name none is not emitted (TestEmitPathsLeavesOutOwnChannels).
//
//   - A path's events reach the application in the order its window
//     changed: whoever opens or closes windows holds the ledger's mu from
//     the first change until the event reporting them is queued, so a
//     Restored of a path can never be queued before the Interrupted of the
//     loss it ends, nor after one of a later loss
//     (TestLedgerOrdersRacingEvents).
//
//   - The worker pool's drops (a full queue) and handler panics are
//     dated from the first loss of a report's window to the report, never
//     ending before they began (TestPoolDropWindowNeverEndsBeforeItBegins);
//     a held message's drop, from its arrival if that is earlier
//     (TestPoolDatesAHeldDropFromItsArrival).
//
// Gathering and rate limits: the paths probes restored are reported
// together per node after restoreGather (TestProbeRestoresGather); stale
// drops once per node every lateReportDelay, naming at most
// maxLateChannels channels; the pool's drops and panics, each kind in one
// event per poolReportInterval at most, naming at most maxPoolChannels
// channels (TestPoolDropsAggregated), the last ones when the broker closes
// (TestPoolDropRacingCloseIsReported).
type ledger struct {
	// mu orders window changes with their events (see the rules above).
	// It is taken before any path's mu, never held across a command, and
	// never held while calling the Router (the cluster's takes its lock).
	mu   sync.Mutex
	emit func(shardcast.Event)
	// partitionOf names a path's partition in events; nil when paths are
	// not partitions.
	partitionOf func(path int) int
	probed      probeRestores
	late        lateReport
	// pool hears of the worker pool's losses (Core.Pool's pool.Losses).
	pool poolLosses
}

// newLedger returns a ledger that emits through emit.
func newLedger(emit func(shardcast.Event), partitionOf func(int) int) *ledger {
	l := &ledger{emit: emit, partitionOf: partitionOf, probed: probeRestores{kick: make(chan struct{}, 1)},
		late: lateReport{emit: emit}}
	l.pool = poolLosses{l: l, interval: poolReportInterval}
	return l
}

// window is one path's loss window. It lives under its path's mu, since
// it opens and closes together with the path leaving and taking a wire.
type window struct {
	since time.Time // start of the open interruption; zero when none
	total spanTotal // the interruptions closed so far
	// spell: a confirmation on a relayed wire closed the interruption,
	// but only a probe that comes back proves delivery; the Restored
	// waits for it, and spellSince dates it.
	spell      bool
	spellSince time.Time
}

// open starts an interruption at at, unless one is open.
func (w *window) open(at time.Time) {
	if w.since.IsZero() {
		w.since = at
	}
}

// close ends the open interruption and returns its start for a Restored,
// zero when there is none to report now: none was open, or the path is
// in a silent spell (relayed with probes on turns an interruption into
// one), to be reported when a probe comes back.
func (w *window) close(relayed, probed bool) time.Time {
	since := w.since
	w.since = time.Time{}
	if !since.IsZero() {
		w.total.end(time.Since(since))
	}
	if relayed && probed && !since.IsZero() && !w.spell {
		w.spell, w.spellSince = true, since
	}
	if w.spell {
		return time.Time{}
	}
	return since
}

// silence starts a silent spell at since (a probe did not come back),
// keeping an earlier start, and reports whether it is the spell's first
// miss, the one an event reports.
func (w *window) silence(since time.Time) (first bool) {
	first = !w.spell
	w.spell = true
	if w.spellSince.IsZero() {
		w.spellSince = since
	}
	return first
}

// endSpell ends the silent spell, if any, and returns its start.
func (w *window) endSpell() (since time.Time, ok bool) {
	if !w.spell {
		return time.Time{}, false
	}
	since = w.spellSince
	w.spell, w.spellSince = false, time.Time{}
	return since, true
}

// carry dates the open interruption, or silent spell, from since if that
// is earlier.
func (w *window) carry(since time.Time) {
	if !w.since.IsZero() && since.Before(w.since) {
		w.since = since
	}
	if w.spell && since.Before(w.spellSince) {
		w.spellSince = since
	}
}

// elapsed returns the total interrupted time, the open interruption
// included (see spanTotal).
func (w *window) elapsed() time.Duration {
	var open time.Duration
	if !w.since.IsZero() {
		open = time.Since(w.since)
	}
	return w.total.read(open)
}

// interrupted reports paths of the node at addr lost since, with cause,
// lists[i] holding the channels of paths[i], in one EventInterrupted.
func (l *ledger) interrupted(addr string, paths []*Path, lists [][]string, since time.Time, cause error) {
	l.emitPaths(shardcast.EventInterrupted, addr, paths, lists, since, cause)
}

// restored reports paths confirmed again on the node at addr, whose
// earliest window opened at since, in one EventRestored naming what they
// want, lists[i] holding the channels of paths[i].
func (l *ledger) restored(addr string, paths []*Path, lists [][]string, since time.Time) {
	l.emitPaths(shardcast.EventRestored, addr, paths, lists, since, nil)
}

// left reports channels that left path p while its window, opened at
// since, is open: restored now, or never (see the rules above). A zero
// since (no open window) reports nothing.
func (l *ledger) left(addr string, p *Path, channels []string, since time.Time) {
	if since.IsZero() || len(channels) == 0 {
		return
	}
	l.emitPaths(shardcast.EventRestored, addr, []*Path{p}, [][]string{channels}, since, nil)
}

// probeBack records that a probe through addr ended p's silent spell,
// begun at since; reportProbed reports it with the others of its node.
func (l *ledger) probeBack(addr string, p *Path, since time.Time) { l.probed.add(addr, p, since) }

// reportProbed reports each node's paths that probes restored in one
// EventRestored, leaving out those interrupted again since their probe
// came back: their spell's start is carried into the later window, whose
// Restored then covers both.
func (l *ledger) reportProbed() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for addr, b := range l.probed.take() {
		live := b.paths[:0]
		var lists [][]string
		for _, p := range b.paths {
			if p.ActiveWire() != nil {
				live = append(live, p)
				lists = append(lists, p.Wanted())
			} else {
				p.carrySince(b.since)
			}
		}
		if len(live) > 0 {
			l.restored(addr, live, lists, b.since)
		}
	}
}

// stale records a message of channel, published at, that a fence of
// partition part (-1: paths are not partitions) dropped on the link to
// addr; channel may be a view of a read buffer.
func (l *ledger) stale(addr string, part int, channel string, at time.Time) {
	l.late.add(addr, part, channel, at)
}

// reportPool reports the worker pool's losses of one kind gathered in w,
// as an EventDropped (a full queue) or EventError (handler panics) ending
// at now, or at w's start should a clock step put now before it.
func (l *ledger) reportPool(kind shardcast.EventKind, w lossWindow, now time.Time) {
	l.emit(shardcast.Event{Kind: kind, Channels: w.channels, Since: w.since, Until: later(now, w.since),
		Count: w.count, Truncated: w.truncated, Err: w.err})
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// close reports the stale drops still pending; later ones are not
// reported. Call it once no reader can drop a message any more.
func (l *ledger) close() { l.late.close() }

// closePool reports the pool's losses still pending; call it once the
// pool is closed.
func (l *ledger) closePool() { l.pool.close() }

// emitPaths reports paths of the node at addr in one event of kind,
// lists[i] holding the channels of paths[i]. A path whose every channel
// is the engine's own is left out, channels and partition; when that
// leaves none of the paths, nothing is emitted: the event would tell the
// application of nothing it subscribed. A path that names no channel at
// all is kept: only channels of the engine's own make a path its business.
func (l *ledger) emitPaths(kind shardcast.EventKind, addr string, paths []*Path, lists [][]string, since time.Time, err error) {
	var kept []*Path
	app := make([][]string, 0, len(lists))
	for i, p := range paths {
		chans := appChannels(lists[i])
		if len(chans) == 0 && len(lists[i]) > 0 {
			continue // the engine's own
		}
		kept = append(kept, p)
		app = append(app, chans)
	}
	if len(kept) == 0 {
		return
	}
	ev := shardcast.Event{Kind: kind, Shard: addr, Channels: concat(app), Since: since, Err: err}
	if kind == shardcast.EventRestored {
		ev.Until = time.Now()
	}
	if l.partitionOf != nil {
		for _, p := range kept {
			ev.Partitions = append(ev.Partitions, l.partitionOf(p.ID))
		}
	}
	l.emit(ev)
}

// restoreGather is how long the paths that probes restored are gathered
// before one event per node reports them: the probes of one tick come
// back within milliseconds of each other, and a restored shard would
// otherwise log one line per partition.
const restoreGather = 20 * time.Millisecond

// probeRestores gathers, by node, the paths whose silent spell a probe
// ended, for runProbes to report together.
type probeRestores struct {
	mu     sync.Mutex
	byAddr map[string]*restoreBatch
	kick   chan struct{} // signalled when the first path of a batch arrives
}

// restoreBatch is the paths one node's probes restored, and the earliest
// start of their spells.
type restoreBatch struct {
	paths []*Path
	since time.Time
}

// add records that a probe on addr ended p's spell, begun at since.
func (r *probeRestores) add(addr string, p *Path, since time.Time) {
	r.mu.Lock()
	if r.byAddr == nil {
		r.byAddr = make(map[string]*restoreBatch)
	}
	first := len(r.byAddr) == 0
	b := r.byAddr[addr]
	if b == nil {
		b = &restoreBatch{since: since}
		r.byAddr[addr] = b
	}
	b.paths = append(b.paths, p)
	if since.Before(b.since) {
		b.since = since
	}
	r.mu.Unlock()
	if first {
		select {
		case r.kick <- struct{}{}:
		default:
		}
	}
}

// take returns the batches gathered so far and starts new ones.
func (r *probeRestores) take() map[string]*restoreBatch {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.byAddr
	r.byAddr = nil
	return out
}

// lateReport gathers the messages paths dropped as stale and reports them:
// one EventDropped per node at most every lateReportDelay, naming the
// channels (up to maxLateChannels, then Truncated) and partitions, with
// Count and, as Since..Until, the earliest and latest publish times of the
// dropped messages: the loss window on the publishers' clocks, which is
// where the application looks for what it missed.
type lateReport struct {
	emit func(shardcast.Event)

	mu      sync.Mutex
	pending map[string]*lateWindow // by node address
	timer   *time.Timer            // set while a report is due
	closed  bool
}

// lateWindow is one node's drops since the last report.
type lateWindow struct {
	ev       shardcast.Event
	channels map[string]bool
	parts    map[int]bool
}

// lateReportDelay is how long drops are gathered before they are reported.
const lateReportDelay = 100 * time.Millisecond

// maxLateChannels caps Event.Channels of one report.
const maxLateChannels = 1000

// add records a message of channel, published at, that the order fence of
// partition part (-1: the engine has no partitions) dropped on the link
// to addr. channel may be a view of a read buffer.
func (r *lateReport) add(addr string, part int, channel string, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	// A stamp is truncated (envelope.Resolution): the message was
	// published up to that much after it, and the window must cover that.
	end := at.Add(envelope.Resolution - time.Nanosecond)
	w := r.pending[addr]
	if w == nil {
		if r.pending == nil {
			r.pending = make(map[string]*lateWindow)
		}
		w = &lateWindow{ev: shardcast.Event{Kind: shardcast.EventDropped, Shard: addr, Since: at, Until: end, Err: errOvertaken},
			channels: make(map[string]bool), parts: make(map[int]bool)}
		r.pending[addr] = w
	}
	w.ev.Count++
	if at.Before(w.ev.Since) {
		w.ev.Since = at
	}
	if end.After(w.ev.Until) {
		w.ev.Until = end
	}
	if !w.channels[channel] {
		if len(w.channels) < maxLateChannels {
			ch := strings.Clone(channel)
			w.channels[ch] = true
			w.ev.Channels = append(w.ev.Channels, ch)
		} else {
			w.ev.Truncated = true
		}
	}
	if part >= 0 && !w.parts[part] {
		w.parts[part] = true
		w.ev.Partitions = append(w.ev.Partitions, part)
	}
	if r.timer == nil {
		r.timer = time.AfterFunc(lateReportDelay, r.flush)
	}
}

// flush emits the pending reports. Events are emitted under the lock, so
// that close returns only once every report is queued on the emitter.
func (r *lateReport) flush() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.timer = nil
	addrs := make([]string, 0, len(r.pending))
	for addr := range r.pending {
		addrs = append(addrs, addr)
	}
	slices.Sort(addrs)
	for _, addr := range addrs {
		ev := r.pending[addr].ev
		slices.Sort(ev.Partitions)
		r.emit(ev)
	}
	clear(r.pending)
}

// close reports what is pending at once; later drops are not reported.
// Call it once no reader can drop a message any more.
func (r *lateReport) close() {
	r.mu.Lock()
	r.closed = true
	if r.timer != nil {
		r.timer.Stop()
	}
	r.mu.Unlock()
	r.flush()
}
