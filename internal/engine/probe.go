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
	gotAt   atomic.Int64  // when it was received (0: never)
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
// through publish, once per interval, a probe on every path that holds
// subscriptions. publish must be the engine's send without the counting
// and sampling of its Publish: probes are not the application's publishes
// (Stats.Published, HotChannels). Call it once the router is set, before
// the links start.
func (c *Core) StartProbes(publish func(ctx context.Context, channel string, payload []byte) error) {
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
	c.probeBack.kick = make(chan struct{}, 1)
	c.Go(func() { c.runProbes(publish) })
}

// runProbes sends a probe on every path that holds subscriptions once per
// ProbeInterval and judges each one exactly when its ProbeTimeout ends, on
// a timer of its own rather than at the next tick: a silent path is then
// reported at most ProbeInterval + ProbeTimeout after it went silent (the
// probe sent just after is the first one lost). A path whose probe is
// still in flight at a tick is not sent another.
func (c *Core) runProbes(publish func(ctx context.Context, channel string, payload []byte) error) {
	tick := time.NewTicker(c.Conn.ProbeInterval)
	defer tick.Stop()
	judge := time.NewTimer(time.Hour)
	judge.Stop()
	defer judge.Stop()
	gather := time.NewTimer(time.Hour)
	gather.Stop()
	defer gather.Stop()
	for {
		send := false
		select {
		case <-c.closing:
			return
		case <-tick.C:
			send = true
		case <-judge.C:
		case <-c.probeBack.kick:
			gather.Reset(restoreGather)
			continue
		case <-gather.C:
			c.reportRestores()
			continue
		}
		now := probeNow()
		next := int64(0) // the earliest deadline of a probe in flight
		for _, p := range c.Paths {
			pr := p.probe
			if pr == nil || p.WantedCount() == 0 {
				continue
			}
			wire := p.ActiveWire()
			if wire == nil {
				continue // interrupted: the loss is known, the heal is under way
			}
			if sent := pr.sent.Load(); sent > pr.got.Load() {
				deadline := pr.sentAt.Load() + int64(c.Conn.ProbeTimeout)
				if now < deadline {
					if next == 0 || deadline < next {
						next = deadline
					}
					continue // still in flight
				}
				c.silent(p, wire)
			}
			if !send {
				continue
			}
			seq := pr.sent.Add(1)
			pr.sentAt.Store(now)
			if deadline := now + int64(c.Conn.ProbeTimeout); next == 0 || deadline < next {
				next = deadline
			}
			c.Go(func() { c.sendProbe(publish, pr, seq) })
		}
		if next != 0 {
			judge.Reset(time.Duration(next - probeNow()))
		}
	}
}

// sendProbe publishes probe seq of pr, bounded by ProbeTimeout. A probe
// whose publish failed before its deadline is forgotten: that is the
// publishing side's trouble, reported elsewhere, and no verdict on the
// path. One still unanswered at its deadline is judged like one that was
// lost: a node that takes longer than ProbeTimeout to answer a publish
// cannot be trusted to deliver either.
func (c *Core) sendProbe(publish func(ctx context.Context, channel string, payload []byte) error, pr *probeState, seq uint64) {
	ctx, cancel := context.WithTimeout(c.ctx, c.Conn.ProbeTimeout)
	defer cancel()
	var payload [8]byte
	binary.BigEndian.PutUint64(payload[:], seq)
	if err := publish(ctx, pr.channel, payload[:]); err != nil {
		pr.settle(seq)
	}
}

// silent handles a probe that did not come back on path p, active on
// wire: the path is interrupted (reported once per silent spell) and
// resubscribed; its Restored waits for a probe to return.
func (c *Core) silent(p *Path, wire interface{ Alive() bool }) {
	pr := p.probe
	since := pr.lastSeen()
	p.mu.Lock()
	first := !p.silentSpell
	p.silentSpell = true
	if p.silentSince.IsZero() {
		p.silentSince = since
	}
	chans, lost := p.dropLocked(since)
	p.mu.Unlock()
	pr.forget()
	addr := ""
	if l := c.router.Carrier(p.ID); l != nil {
		addr = l.Addr
	}
	if first && lost {
		c.emitPaths(shardcast.EventInterrupted, addr, []*Path{p}, [][]string{chans}, since,
			fmt.Errorf("%s: %w", c.router.Describe(p.ID), shardcast.ErrSilentPath))
	} else {
		// The spell's first miss was reported as an event; the misses
		// that follow until a probe returns are logged only.
		c.Log.Warn("shardcast: delivery probe not received again; resubscribing", "node", addr,
			"path", c.router.Describe(p.ID), "silent_since", since.Format(time.RFC3339Nano))
	}
	c.trouble(addr)
	c.RequestRefresh()
}

// lastSeen is when messages may have been lost from on the probe's path:
// when the last probe seen came back, or was sent if none came back yet
// (now if none was sent).
func (pr *probeState) lastSeen() time.Time {
	if at := pr.gotAt.Load(); at != 0 {
		return probeTime(at)
	}
	if at := pr.sentAt.Load(); at != 0 {
		return probeTime(at)
	}
	return time.Now()
}

// probeArrived records a probe received on path p. The first one after a
// silent spell reports the path restored.
func (c *Core) probeArrived(l *Link, p *Path, payload []byte) {
	pr := p.probe
	if len(payload) != 8 {
		return
	}
	pr.settle(binary.BigEndian.Uint64(payload))
	pr.gotAt.Store(probeNow())
	p.mu.Lock()
	spell, since := p.silentSpell, p.silentSince
	active := p.wire != nil
	if spell && active {
		p.silentSpell, p.silentSince = false, time.Time{}
	}
	p.mu.Unlock()
	if spell && active {
		c.probeBack.add(l.Addr, p, since)
	}
}
