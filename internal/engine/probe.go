package engine

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/subconn"
)

// ProbeChannelPrefix starts the names of the channels delivery probes
// travel on. Probes never reach the Handler (see shardcast.ValidateChannel).
const ProbeChannelPrefix = "shardcast.probe:"

// probeState is a path's delivery probe: the channel it travels on (one
// that maps to the path), the last probe sent and the last one received.
// Times are on the monotonic clock, in ns since probeBase: a step of the
// wall clock must neither hide a silent path nor make a healthy one look
// silent.
type probeState struct {
	channel string
	sent    atomic.Uint64 // sequence number of the last probe published
	sentAt  atomic.Int64  // when it was published
	got     atomic.Uint64 // sequence number of the last probe received
	// seenAt is when the newest probe that came back through seenOn, the
	// path's wire then, was published (0: none yet): what was published
	// before it on the path's node was delivered. A relayed wire dates
	// its losses from its link instead (see probeGroup.lastSeen). Both are
	// under the path's mu.
	seenAt int64
	seenOn *subconn.Conn
}

// inFlight reports whether a probe is awaited, and its deadline.
func (pr *probeState) inFlight(timeout time.Duration) (deadline int64, ok bool) {
	if pr.sent.Load() <= pr.got.Load() {
		return 0, false
	}
	return pr.sentAt.Load() + int64(timeout), true
}

// saw records that a probe published at `at` came back through p's
// wire, if p is still active on it.
func (p *Path) saw(wire *subconn.Conn, at int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.wire.Load() != wire {
		return
	}
	if p.probe.seenOn != wire || at > p.probe.seenAt {
		p.probe.seenAt, p.probe.seenOn = at, wire
	}
}

// seenOnWire returns when the newest probe that came back through wire
// on p was published, 0 if none did.
func (p *Path) seenOnWire(wire *subconn.Conn) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.probe.seenOn != wire {
		return 0
	}
	return p.probe.seenAt
}

// probeBase is the origin of probe times.
var probeBase = time.Now()

// probeNow is the monotonic time since probeBase, in ns, never 0.
func probeNow() int64 { return int64(time.Since(probeBase)) + 1 }

// probeTime turns a probe time back into a time.Time.
func probeTime(ns int64) time.Time { return probeBase.Add(time.Duration(ns - 1)) }

// forget drops the probe in flight, if any, without a verdict: it was lost
// with a wire the path left, or with the probe channel's subscription, and
// says nothing of the path as it is now. The next tick sends a new one.
func (pr *probeState) forget() {
	pr.settle(pr.sent.Load())
}

// settle counts every probe up to seq as answered, so that a late copy of
// one of them can never pass for a later probe.
func (pr *probeState) settle(seq uint64) {
	for {
		got := pr.got.Load()
		if got >= seq || pr.got.CompareAndSwap(got, seq) {
			return
		}
	}
}

// StartProbes turns delivery probes on when Conn.ProbeInterval is set and
// the broker subscribes: each path gets a probe channel of its own (found
// by trying names until one maps to the path), and a goroutine publishes
// through publish, once per interval, a probe on every wire that holds
// subscriptions (see probeGroups). With relaysOnly, only relayed wires
// are probed, and the paths still in a silent spell: the engine turned
// probes on for its replicas, not for its masters. publish must be the
// engine's send without the counting and sampling of its Publish: probes
// are not the application's publishes (Stats.Published, HotChannels).
// Call it once the router is set, before the links start.
func (c *Core) StartProbes(publish func(ctx context.Context, channel string, payload []byte) error, relaysOnly bool) {
	if c.Conn.ProbeInterval <= 0 || c.Paths == nil {
		return
	}
	node := strconv.FormatUint(rand.Uint64(), 36)
	// Names are tried until every path has one, or until a long run of
	// tries found no new path: not every path can be reached (the paths of
	// a layout not in use, which a cluster broker keeps for an online
	// re-layout), and the run allowed, 64 tries per path found, makes
	// missing a reachable one unlikely (the last of k paths takes k tries
	// on average).
	missing, found, last := len(c.Paths), 0, 0
	for n := 0; missing > 0 && n-last <= 64*(found+1); n++ {
		ch := ProbeChannelPrefix + node + ":" + strconv.Itoa(n)
		if p := c.Paths[c.router.PathOf(ch)]; p.probe == nil {
			p.probe = &probeState{channel: ch}
			missing--
			found++
			last = n
		}
	}
	c.probeRelaysOnly = relaysOnly
	c.Go(func() { c.runProbes(publish) })
}

// runProbes sends a probe through every probe group (see probeGroups)
// once per ProbeInterval and judges each one exactly when its
// ProbeTimeout ends, on a timer of its own rather than at the next tick:
// a silent wire is then reported at most ProbeInterval + ProbeTimeout
// after it went silent (the probe sent just after is the first one
// lost). A group with a probe still in flight at a tick is not sent
// another; a group of several paths takes its probe from each in turn.
func (c *Core) runProbes(publish func(ctx context.Context, channel string, payload []byte) error) {
	tick := time.NewTicker(c.Conn.ProbeInterval)
	defer tick.Stop()
	judge := time.NewTimer(time.Hour)
	judge.Stop()
	defer judge.Stop()
	gather := time.NewTimer(time.Hour)
	gather.Stop()
	defer gather.Stop()
	turn := 0
	for {
		send := false
		select {
		case <-c.closing:
			return
		case <-tick.C:
			send = true
			turn++
		case <-judge.C:
		case <-c.ledger.probed.kick:
			gather.Reset(restoreGather)
			continue
		case <-gather.C:
			c.ledger.reportProbed()
			continue
		}
		now := probeNow()
		next := int64(0) // the earliest deadline of a probe in flight
		soonest := func(deadline int64) {
			if next == 0 || deadline < next {
				next = deadline
			}
		}
		for _, g := range c.probeGroups() {
			if deadline, ok := g.inFlight(c.Conn.ProbeTimeout); ok {
				if now < deadline {
					soonest(deadline)
					continue // still in flight
				}
				c.silent(g)
			}
			if !send {
				continue
			}
			pr := g.paths[turn%len(g.paths)].probe
			seq := pr.sent.Add(1)
			pr.sentAt.Store(now)
			soonest(now + int64(c.Conn.ProbeTimeout))
			c.Go(func() { c.sendProbe(publish, pr, seq, now) })
		}
		if next != 0 {
			judge.Reset(time.Duration(next - probeNow()))
		}
	}
}

// probeSize is a probe's payload: its sequence number and when it was
// published (probe time), both big-endian.
const probeSize = 16

// sendProbe publishes probe seq of pr, sent at `at`, bounded by
// ProbeTimeout. A probe whose publish failed before its deadline is
// forgotten: that is the publishing side's trouble, reported elsewhere,
// and no verdict on the path. One still unanswered at its deadline is
// judged like one that was lost: a node that takes longer than
// ProbeTimeout to answer a publish cannot be trusted to deliver either.
func (c *Core) sendProbe(publish func(ctx context.Context, channel string, payload []byte) error, pr *probeState, seq uint64, at int64) {
	ctx, cancel := context.WithTimeout(c.ctx, c.Conn.ProbeTimeout)
	defer cancel()
	var payload [probeSize]byte
	binary.BigEndian.PutUint64(payload[:8], seq)
	binary.BigEndian.PutUint64(payload[8:], uint64(at))
	if err := publish(ctx, pr.channel, payload[:]); err != nil {
		pr.settle(seq)
	}
}

// silent handles a probe that did not come back through group g: every
// path of g still active on g's wire is interrupted (reported once per
// silent spell, in one event) and resubscribed, its loss dated from
// g.lastSeen; its Restored waits for a probe to return.
func (c *Core) silent(g probeGroup) {
	since := g.lastSeen()
	var paths []*Path
	var lists [][]string
	again := 0
	// The node is named before the ledger's lock is taken: the router
	// may take the engine's own.
	addr := ""
	if l := g.relay; l != nil {
		addr = l.Addr
	} else if l := c.probeLink(g.paths[0], g.wire); l != nil {
		addr = l.Addr
	}
	c.ledger.mu.Lock()
	for _, p := range g.paths {
		p.mu.Lock()
		if p.wire.Load() != g.wire {
			p.mu.Unlock()
			continue // moved on meanwhile: the verdict is not its own
		}
		first := p.win.silence(since)
		chans, lost := p.dropLocked(since)
		p.mu.Unlock()
		p.probe.forget()
		if first && lost {
			paths, lists = append(paths, p), append(lists, chans)
		} else {
			again++
		}
	}
	if len(paths) == 0 && again == 0 {
		c.ledger.mu.Unlock()
		return // every path moved on: no verdict on the node
	}
	if len(paths) > 0 {
		c.ledger.interrupted(addr, paths, lists, since,
			fmt.Errorf("%s: %w", c.describeAll(paths), shardcast.ErrSilentPath))
	}
	c.ledger.mu.Unlock()
	if again > 0 {
		// The spell's first miss was reported as an event; the misses
		// that follow until a probe returns are logged only.
		c.Log.Warn("shardcast: delivery probe not received again; resubscribing", "node", addr,
			"paths", again, "silent_since", since.Format(time.RFC3339Nano))
	}
	c.trouble(addr)
	c.RequestRefresh()
}

// describeAll names paths in an error: the one path, or how many.
func (c *Core) describeAll(paths []*Path) string {
	if len(paths) == 1 {
		return c.router.Describe(paths[0].ID)
	}
	return fmt.Sprintf("%d paths on one wire, among them %s", len(paths), c.router.Describe(paths[0].ID))
}

// probeArrived records a probe received through link l on path p. On a
// relayed link it speaks for every path the wire carries, since one relay
// brings them all: those in a silent spell are reported restored.
func (c *Core) probeArrived(l *Link, p *Path, payload []byte) {
	if len(payload) != probeSize {
		return
	}
	p.probe.settle(binary.BigEndian.Uint64(payload[:8]))
	at := int64(binary.BigEndian.Uint64(payload[8:]))
	wire := p.ActiveWire()
	if wire == nil {
		return // interrupted meanwhile: the heal is under way
	}
	p.saw(wire, at)
	c.endSpell(l, p)
	if !l.Relayed.Load() {
		return
	}
	for _, q := range c.Paths {
		if q != p && q.probe != nil && q.ActiveWire() == wire {
			c.endSpell(l, q)
		}
	}
}

// endSpell ends p's silent spell, if it has one and is active, for
// runProbes to report restored.
func (c *Core) endSpell(l *Link, p *Path) {
	p.mu.Lock()
	var since time.Time
	spell := false
	if p.wire.Load() != nil {
		since, spell = p.win.endSpell()
	}
	p.mu.Unlock()
	if spell {
		c.ledger.probeBack(l.Addr, p, since)
	}
}
