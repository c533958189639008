package engine

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/subconn"
)

// Path is one subscribe path: the unit whose channels are subscribed,
// lost and restored together (a cluster partition, or one subscribe
// connection of a sharded instance). It holds the channels wanted on it
// and the wire on which Redis confirmed them.
type Path struct {
	// ID is the path's index in Core.Paths.
	ID int
	// turn serialises the subscribe, unsubscribe and resubscribe commands
	// of this path, so Redis sees one channel's commands in call order.
	// Whoever holds several turns takes them in ascending ID order.
	turn Turn

	mu     sync.Mutex
	wanted ChannelSet
	// state holds the wire the path is active on (nil while interrupted)
	// and the count of wanted channels.
	*state
	// win is the path's loss window (see ledger).
	win window
	// lost counts server-pushed unsubscribes seen for this path, and the
	// slot moves that took it to another node. A subscribe reads it
	// before sending and takes the confirmation only if it is unchanged
	// once Redis confirmed: a push or a move that overtook it would
	// otherwise be ignored and leave the path silently dead, or active
	// on a node that no longer serves it.
	lost uint64
	// owner is the link whose wire the path's channels were last sent to
	// subscribe. Messages for the path are taken only from it: after a
	// move (a failover, a slot migration) the old node may keep delivering
	// on its wire until it learns it lost the slot, and the same message
	// then arrives twice.
	owner atomic.Pointer[Link]
	// lastAt is the latest publish time (Unix ns) of a message taken on
	// the path. When the path moves to another link, fence holds it until
	// fenceUntil: the new node may still deliver, for a moment, messages
	// the old one already delivered (a message published on the old
	// master reaches the rest of its shard over the cluster bus, so the new
	// master can deliver it after the broker subscribed there), and a
	// message published no later than the fence is taken to be one.
	lastAt, fence, fenceUntil atomic.Int64
	// failover is set by a move whose new node was a replica of the old
	// one; the next change of owner fences, and clears it.
	failover atomic.Bool
	// order keeps each channel in publish order for orderSpan after a
	// failover move: the demoted master relays, late, what publishers
	// still routed to it send (see orderFence).
	order     orderFence
	orderSpan time.Duration

	// Counters of the path's messages.
	received, dropped, badFrames, stale atomic.Uint64

	// probe is the path's delivery probe (nil when probes are off). A
	// silent spell (see window) begins when a probe does not come back
	// and ends when one does: its Restored is raised then, not on
	// resubscribing.
	probe *probeState
}

// orderSpan is how long, by default, a failover move keeps the path's
// channels in publish order: twice the default HealthInterval (see
// NewCore).
const orderSpan = 2 * shardcast.DefaultHealthInterval

// setOwner records that the path's channels are being subscribed on l,
// and returns the link that owned them before. A change of link after a
// failover move fences off copies of what the old one delivered, and arms
// the order fence.
func (p *Path) setOwner(l *Link) (prev *Link) {
	prev = p.owner.Swap(l)
	if prev == nil || prev == l || !p.failover.Swap(false) {
		return prev
	}
	now := time.Now()
	// As long as the order fence: the bus relays within milliseconds on an
	// idle host, but a loaded one was seen to deliver copies after half a
	// second. What the fence drops is reported (see Core.reportStale): a
	// message a lagging clock or a descheduled publisher stamped before
	// the old link's last is not lost silently. The fence is at least 1,
	// so that it is up even before the path took a message: the old
	// link's reader may be taking one right now (see raiseFence).
	p.fenceUntil.Store(now.Add(p.orderSpan).UnixNano())
	last := max(p.lastAt.Load(), 1)
	p.fence.Store(last)
	// A message the old link's reader took while the fence was being set
	// (it passed the owner check before the swap above) may have stamped
	// lastAt after it was read: read it again now that the fence is
	// stored; a later stamp is covered by the reader itself.
	if again := p.lastAt.Load(); again > last {
		p.raiseFence(again)
	}
	p.order.arm(now, p.orderSpan)
	return prev
}

// raiseFence lifts an up fence to ns, unless it is higher already.
func (p *Path) raiseFence(ns int64) {
	for {
		f := p.fence.Load()
		if f == 0 || f >= ns || p.fence.CompareAndSwap(f, ns) {
			return
		}
	}
}

// keepOwner undoes setOwner after a resubscribe that did not activate the
// path on the new link, while the path is still active on prev's wire:
// prev keeps delivering it (until a move interrupts it), so its messages
// must not be taken for stale copies. failover is what the path's
// failover mark was before setOwner: the retry of the move fences again.
func (p *Path) keepOwner(prev *Link, failover bool) {
	if prev == nil {
		return
	}
	if w := p.ActiveWire(); w != nil && w == prev.Current() {
		p.owner.Store(prev)
		p.fence.Store(0)
		p.failover.Store(failover)
	}
}

// admit reports whether a message published at ns (Unix ns) may be taken:
// not a copy fenced off by a move. It runs on the owner's reader.
func (p *Path) admit(ns int64) bool {
	if f := p.fence.Load(); f != 0 {
		if time.Now().UnixNano() >= p.fenceUntil.Load() {
			p.fence.Store(0)
		} else if ns <= f {
			return false
		}
	}
	if ns > p.lastAt.Load() {
		p.lastAt.Store(ns)
	}
	return true
}

// taken is called by link l's reader after admit let a message published
// at ns through, having found l the path's owner before: when the owner
// changed in between, the move's fence may have been set from a lastAt
// read before this message stamped it, and its copy from the new node
// would get through. The fence is raised to cover it. (The mover reads
// lastAt again after setting the fence, so one of the two sees it.)
func (p *Path) taken(l *Link, ns int64) {
	if p.owner.Load() != l {
		p.raiseFence(ns)
	}
}

// state is what a walk over every path of a broker reads: a maintenance
// pass, a lost wire. It changes under the path's mu and is read without
// it. A broker's states lie side by side in one array (see newPaths), so
// that such a walk reads 16 bytes per path, not a cache line of its own:
// a cluster broker has 8192 paths, most of them idle.
type state struct {
	wire    atomic.Pointer[subconn.Conn]
	nWanted atomic.Int32
}

func newPath(id int) *Path {
	return &Path{ID: id, state: new(state), turn: NewTurn(), wanted: ChannelSet{}, orderSpan: orderSpan}
}

// newPaths returns paths 0 to n-1 and their states, in one array.
func newPaths(n int) ([]*Path, []state) {
	states := make([]state, n)
	paths := make([]*Path, n)
	for i := range paths {
		paths[i] = &Path{ID: i, state: &states[i], turn: NewTurn(), wanted: ChannelSet{}, orderSpan: orderSpan}
	}
	return paths, states
}

// active returns the wire the state's path is active on, nil while it is
// interrupted (see Path.ActiveWire).
func (s *state) active() *subconn.Conn {
	w := s.wire.Load()
	if w != nil && !w.Alive() {
		return nil
	}
	return w
}

func (p *Path) lock(ctx context.Context, closing <-chan struct{}) error {
	return p.turn.Lock(ctx, closing)
}

func (p *Path) unlock() { p.turn.Unlock() }

// ActiveWire returns the wire carrying the path, or nil while it is
// interrupted.
func (p *Path) ActiveWire() *subconn.Conn { return p.active() }

// interrupt marks the path as no longer subscribed if it is carried by
// wire (any wire when wire is nil). It returns the wanted channels when
// this starts an interruption that loses subscriptions.
func (p *Path) interrupt(wire *subconn.Conn, at time.Time) ([]string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.carriedBy(wire) {
		return nil, false
	}
	return p.dropLocked(at)
}

// carriedBy reports whether the state's path is active on wire (on any
// wire when wire is nil).
func (s *state) carriedBy(wire *subconn.Conn) bool {
	w := s.wire.Load()
	return w != nil && (wire == nil || w == wire)
}

// interruptUnlessLocked interrupts the path unless it is active on keep (a
// nil keep interrupts it whatever wire carries it). It returns the wanted
// channels when this starts an interruption that loses subscriptions. The
// caller holds p.mu.
func (p *Path) interruptUnlessLocked(keep *subconn.Conn, at time.Time) ([]string, bool) {
	if w := p.wire.Load(); w == nil || (keep != nil && w == keep) {
		return nil, false
	}
	return p.dropLocked(at)
}

// dropLocked takes the path off its wire, dating the interruption from at
// unless one is already under way, and returns the wanted channels when
// there are any (an interruption that loses subscriptions). The caller
// holds p.mu.
func (p *Path) dropLocked(at time.Time) ([]string, bool) {
	p.wire.Store(nil)
	if len(p.wanted) == 0 {
		return nil, false
	}
	p.win.open(at)
	return p.wanted.Slice(), true
}

// activate records that every wanted channel is confirmed on wire. It
// returns when the interruption it ends began (zero if none).
func (p *Path) activate(wire *subconn.Conn) time.Time {
	since, _ := p.activateIf(wire, p.lostSeq(), false)
	return since
}

// lostSeq returns the count of server-pushed unsubscribes so far.
func (p *Path) lostSeq() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lost
}

// activateIf is activate, unless a server-pushed unsubscribe arrived since
// lostSeq returned seq: then the confirmation may already be void and the
// path stays interrupted (ok is false). On a relayed wire (see
// Link.Relayed) an interruption it ends turns into a silent spell, ended
// by the next probe that comes back.
func (p *Path) activateIf(wire *subconn.Conn, seq uint64, relayed bool) (since time.Time, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.lost != seq || !wire.Alive() {
		// A wire that died meanwhile: its loss handler may already have
		// passed this path, so activating it would hide the loss.
		return time.Time{}, false
	}
	p.wire.Store(wire)
	if p.probe != nil {
		p.probe.forget() // one sent before the path came back was lost with its old wire
	}
	if p.order.armed() {
		// The order fence runs from the move's confirmation, however
		// long the resubscribe took.
		p.order.extend(time.Now(), p.orderSpan)
	}
	return p.win.close(relayed, p.probe != nil), true
}

// noteLost records a server-pushed unsubscribe that arrived on wire and
// interrupts the path if wire carries it. It returns the wanted channels
// when this starts an interruption.
func (p *Path) noteLost(wire *subconn.Conn, at time.Time) ([]string, bool) {
	p.mu.Lock()
	p.lost++
	p.mu.Unlock()
	if wire == nil {
		return nil, false
	}
	return p.interrupt(wire, at)
}

// Wanted returns the channels wanted on the path, in no particular order.
func (p *Path) Wanted() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.wanted.Slice()
}

// WantedCount returns how many channels are wanted on the path.
func (p *Path) WantedCount() int { return int(p.nWanted.Load()) }

// missing returns the channels not yet wanted, without duplicates.
func (p *Path) missing(channels []string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.wanted.Missing(channels)
}

func (p *Path) add(channels []string, token uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.wanted.Add(channels, token)
	p.nWanted.Store(int32(len(p.wanted)))
}

// addIfActive adds channels to the wanted set if the path is still active
// on wire and no server-pushed unsubscribe or slot move came since
// lostSeq returned seq; otherwise the confirmation of their subscribe may
// be void, and it adds nothing.
func (p *Path) addIfActive(wire *subconn.Conn, seq uint64, channels []string, token uint64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.lost != seq || p.wire.Load() != wire || !wire.Alive() {
		return false
	}
	p.wanted.Add(channels, token)
	p.nWanted.Store(int32(len(p.wanted)))
	return true
}

// remove drops channels from the wanted set and returns those that were in
// it; with a non-zero token only those whose last asker is that call.
func (p *Path) remove(channels []string, token uint64) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	defer func() { p.nWanted.Store(int32(len(p.wanted))) }()
	if token != 0 {
		return p.wanted.RemoveClaimed(channels, token)
	}
	return p.wanted.Remove(channels)
}

// openSince returns when the path's open interruption began, zero when
// none is open.
func (p *Path) openSince() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.win.since
}

// interruptedFor returns the path's total interrupted time, the open
// interruption included. It never returns less than before: the total
// and the open interruption are read together, and a wall clock stepped
// back (an interruption dated from a link's last proof of health) can
// make it pause, not fall.
func (p *Path) interruptedFor() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.win.elapsed()
}

// carrySince dates p's open interruption, or silent spell, from since if
// that is earlier: a spell a probe ended was not reported restored before
// the path was lost again, so the loss runs from the spell's start.
func (p *Path) carrySince(since time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.win.carry(since)
}

// subscribed returns the channels to subscribe on the path's wire: the
// wanted ones and, while there are any and probes are on, its probe
// channel.
func (p *Path) subscribed() []string {
	chans := p.Wanted()
	if len(chans) > 0 && p.probe != nil {
		chans = append(chans, p.probe.channel)
	}
	return chans
}
