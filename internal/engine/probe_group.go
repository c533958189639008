package engine

import (
	"time"

	"github.com/shardcast/shardcast/internal/subconn"
)

// probeGroup is the paths one probe speaks for: those a relayed wire
// carries (a replica gets every partition of its shard from one relay,
// so one probe through any of them shows whether the relay still
// delivers), or a single path anywhere else (a master's partitions can go
// quiet one by one, so each is probed on its own).
type probeGroup struct {
	wire  *subconn.Conn
	relay *Link // the relayed link whose wire it is; nil for a single path
	paths []*Path
}

// probeGroups returns the groups to probe now: every path that holds
// subscriptions and is active, grouped by wire where the wire is relayed.
// With probeRelaysOnly, a path on a wire that is not relayed is left out
// unless it is in a silent spell (its Restored waits for a probe), and a
// probe it had in flight is forgotten: it was sent while the path was on
// a relay, and says nothing of the node it is on now.
func (c *Core) probeGroups() []probeGroup {
	var groups []probeGroup
	relays := make(map[*subconn.Conn]int)
	for i := range c.states {
		if c.states[i].nWanted.Load() == 0 {
			continue
		}
		p := c.Paths[i]
		if p.probe == nil {
			continue
		}
		wire := p.ActiveWire()
		if wire == nil {
			continue // interrupted: the loss is known, the heal is under way
		}
		var relay *Link
		if l := c.probeLink(p, wire); l != nil && l.Relayed.Load() {
			if i, ok := relays[wire]; ok {
				groups[i].paths = append(groups[i].paths, p)
				continue
			}
			relays[wire], relay = len(groups), l
		} else if c.probeRelaysOnly && !p.inSpell() {
			p.probe.forget()
			continue
		}
		groups = append(groups, probeGroup{wire: wire, relay: relay, paths: []*Path{p}})
	}
	return groups
}

// probeLink returns the link whose current wire is p's wire: the one it
// was last subscribed through, or the one the router has it on (nil if
// neither is, as when the path is between two links).
func (c *Core) probeLink(p *Path, wire *subconn.Conn) *Link {
	if l := p.owner.Load(); l != nil && l.Current() == wire {
		return l
	}
	if l := c.router.Carrier(p.ID); l != nil && l.Current() == wire {
		return l
	}
	return nil
}

// inSpell reports whether p is in a silent spell.
func (p *Path) inSpell() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.win.spell
}

// inFlight reports whether a probe of g is awaited, and the earliest
// deadline of those that are.
func (g probeGroup) inFlight(timeout time.Duration) (deadline int64, ok bool) {
	for _, p := range g.paths {
		if d, in := p.probe.inFlight(timeout); in && (!ok || d < deadline) {
			deadline, ok = d, true
		}
	}
	return deadline, ok
}

// lastSeen is when messages may have been lost from on g's wire. On a
// relay it is the link's LastHealthy: the relay delivers in order, so
// everything published before the newest message it brought arrived.
// Otherwise it is when the newest probe that came back through the wire
// was published; if none did, when the earliest probe still awaited was
// sent (now if none was).
func (g probeGroup) lastSeen() time.Time {
	if g.relay != nil {
		if at := g.relay.LastHealthy(); !at.IsZero() {
			return at
		}
	}
	seen, sent := int64(0), int64(0)
	for _, p := range g.paths {
		seen = max(seen, p.seenOnWire(g.wire))
		if _, ok := p.probe.inFlight(0); ok {
			if at := p.probe.sentAt.Load(); sent == 0 || at < sent {
				sent = at
			}
		}
	}
	switch {
	case seen != 0:
		return probeTime(seen)
	case sent != 0:
		return probeTime(sent)
	}
	return time.Now()
}
