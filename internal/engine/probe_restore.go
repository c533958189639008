package engine

import (
	"sync"
	"time"
)

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

// reportRestores reports each node's gathered paths in one EventRestored,
// leaving out those interrupted again since their probe came back: their
// spell's start is carried into the later interruption, whose Restored
// then covers both.
func (c *Core) reportRestores() {
	for addr, b := range c.probeBack.take() {
		live := b.paths[:0]
		for _, p := range b.paths {
			if p.ActiveWire() != nil {
				live = append(live, p)
			} else {
				p.carrySince(b.since)
			}
		}
		if len(live) > 0 {
			c.emitRestored(addr, live, b.since)
		}
	}
}

// carrySince dates p's open interruption, or silent spell, from since if
// that is earlier: a spell a probe ended was not reported restored before
// the path was lost again, so the loss runs from the spell's start.
func (p *Path) carrySince(since time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.downSince.IsZero() && since.Before(p.downSince) {
		p.downSince = since
	}
	if p.silentSpell && since.Before(p.silentSince) {
		p.silentSince = since
	}
}
