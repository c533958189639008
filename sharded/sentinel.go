package sharded

import (
	"context"
	"fmt"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/engine"
	"github.com/shardcast/shardcast/internal/pubconn"
	"github.com/shardcast/shardcast/internal/redisaddr"
	"github.com/shardcast/shardcast/internal/sentinel"
)

// masterWatch follows the master of a shard reached through Sentinel. One
// watch serves every slot value the shard has over its moves.
type masterWatch struct {
	group *sentinel.Group
	stop  context.CancelFunc
}

// close ends the watch and closes its connections to the Sentinels; nil
// (a shard without Sentinel) does nothing.
func (w *masterWatch) close() {
	if w != nil {
		w.stop()
		w.group.Close()
	}
}

// sentinelGroup returns the Sentinels of t, a Sentinel shard, dialled as
// t.SentinelDialer says, their commands bounded as conn's publishing
// connections' are.
func sentinelGroup(t redisaddr.Target, conn shardcast.ConnOptions) *sentinel.Group {
	return sentinel.New(t.Sentinels, t.Master, t.SentinelDialer, engine.PubTimeouts(conn))
}

// newSlot returns the slot of target t, its links not yet made. A master
// reached through Sentinel is asked for first, bounded by ctx, and every
// connection to it checks that it is still a master.
func (b *Broker) newSlot(ctx context.Context, t redisaddr.Target, conn shardcast.ConnOptions) (*slot, error) {
	d := t.Dialer
	var w *masterWatch
	if t.Master != "" {
		g := sentinelGroup(t, conn)
		addr, err := g.Ask(ctx)
		if err != nil {
			g.Close()
			return nil, err
		}
		d.Addr, d.Master = addr, true
		w = &masterWatch{group: g, stop: func() {}}
	}
	return &slot{addr: t.ID, dial: d, sub: d, pub: pubconn.New(d, engine.PubTimeouts(conn)), master: w, sentinels: t.Sentinels}, nil
}

// watchMaster follows the master of slot i, if Sentinel names it, until
// the broker closes: a move gives the slot connections to the new master
// (moveMaster).
func (b *Broker) watchMaster(i int, sh *slot) {
	if sh == nil || sh.master == nil {
		return
	}
	ctx, cancel := context.WithCancel(b.core.Ctx())
	sh.master.stop = cancel
	b.core.Go(func() {
		sh.master.group.Watch(ctx, sh.dial.Addr, b.conn.HealthInterval, func(addr string, since time.Time) {
			b.moveMaster(i, sh.addr, addr, since)
		})
	})
	if b.place != nil {
		b.core.Go(func() { b.keepPlaced(ctx, i) })
	}
}

// moveMaster points slot i at addr, the master Sentinel names now: new
// publishes go there, and so do the slot's subscriptions when they were on
// the old master (see reslotLocked). On a replica they stay: Sentinel points the
// replica at the new master and drops its clients, and the links
// reconnect there. id is the shard's entry: a re-layout may have given
// slot i to another shard since the watch saw the move.
func (b *Broker) moveMaster(i int, id, addr string, since time.Time) {
	b.slotMu.Lock()
	old := b.slots[i].Load()
	if old == nil || old.addr != id || old.master == nil || old.dial.Addr == addr {
		b.slotMu.Unlock()
		return
	}
	sub := ""
	if old.sub.Addr == old.dial.Addr {
		sub = addr
	}
	b.reslotLocked(i, old, addr, sub, since, true)
}

// reslotLocked replaces slot i's value with one whose publishes go to master
// (unless it is "") and whose paths are subscribed on sub (unless it is
// ""), and unlocks slotMu, which the caller holds. Moved paths are
// reported Interrupted (from when the old node was last known healthy, or
// from since, whichever is earlier) and then Restored once resubscribed.
// A move is fenced like a cluster failover (engine.Move.Failover): both
// nodes of a shard get the same messages, and the old one, until Sentinel
// demotes it, may deliver for a moment what publishers not yet told of the
// move send it; what it delivers then is dropped and reported, never
// delivered twice or lost silently. The old publishing connection closes
// after ReplyTimeout, so that publishes sent on it get their replies. The
// old links close at once, or with linger (a move off a master Sentinel
// replaced) once their wire is gone: Sentinel drops the clients of a
// master it demotes, and until then the old master may still get what
// publishers not yet told of the move send.
func (b *Broker) reslotLocked(i int, old *slot, master, sub string, since time.Time, linger bool) {
	sh := *old
	if master != "" && master != old.dial.Addr {
		sh.dial.Addr = master
		sh.pub = pubconn.New(sh.dial, engine.PubTimeouts(b.conn))
	}
	retired := &slot{}
	if sh.pub != old.pub {
		retired.pub = old.pub
	}
	var moves []engine.Move
	if sub != "" && sub != old.sub.Addr && b.core.Paths != nil && !b.core.Closed() {
		sh.sub = sh.dial
		sh.sub.Addr, sh.sub.Master = sub, sub == sh.dial.Addr
		b.newLinks(i, &sh)
		for j, l := range old.links {
			from := l.LastHealthy()
			if !since.IsZero() && (from.IsZero() || since.Before(from)) {
				from = since
			}
			moves = append(moves, engine.Move{Path: i*b.conns + j, From: old.sub.Addr, To: sub, Since: from, Failover: true})
		}
		if b.retiring == nil {
			b.retiring = make(map[*engine.Link]bool)
		}
		for _, l := range old.links {
			b.retiring[l] = true
		}
		retired.links = old.links
	}
	if retired.pub == nil && retired.links == nil {
		b.slotMu.Unlock()
		return
	}
	b.slots[i].Store(&sh)
	b.slotMu.Unlock()
	b.pruneReaders()

	b.core.Log.Info("shardcast: a Sentinel shard's connections moved", "shard", old.addr,
		"master", old.dial.Addr+" → "+sh.dial.Addr, "subscribed_on", old.sub.Addr+" → "+sh.sub.Addr)
	b.core.InterruptMoved(moves, func(from, to string) error {
		return fmt.Errorf("shardcast: %s's subscriptions moved from %s to %s (Sentinel)", old.addr, from, to)
	})
	if len(moves) > 0 {
		for _, l := range sh.links {
			l.Start()
		}
	}
	if !linger {
		// A node the shard keeps gets every message the new one does:
		// its copies would only be dropped as stale.
		b.stopRetired(retired)
	}
	b.core.Go(func() { b.retire(retired) })
}

// stopRetired stops the links of a replaced slot value now.
func (b *Broker) stopRetired(old *slot) {
	for _, l := range old.links {
		l.Stop()
	}
	b.slotMu.Lock()
	for _, l := range old.links {
		delete(b.retiring, l)
	}
	b.slotMu.Unlock()
	old.links = nil
}

// retire closes the connections of a slot value a move replaced: its
// publishing connection after ReplyTimeout, its links once none has a
// wire any more or after retireWithin, or at once when the broker
// closes.
func (b *Broker) retire(old *slot) {
	replies := time.NewTimer(b.conn.ReplyTimeout)
	defer replies.Stop()
	deadline := time.Now().Add(retireWithin * b.conn.HealthInterval)
	tick := time.NewTicker(retirePoll)
	defer tick.Stop()
	pub := old.pub
	if pub == nil {
		replies.Stop()
	}
	for pub != nil || len(old.links) > 0 {
		select {
		case <-b.core.Closing():
			if pub != nil {
				pub.Close()
			}
			return // teardown stops the links
		case <-replies.C:
			pub.Close()
			pub = nil
		case <-tick.C:
			if !time.Now().After(deadline) && anyWire(old.links) {
				continue
			}
			b.stopRetired(old)
		}
	}
}

// retireWithin bounds, in HealthIntervals, how long the links to a master
// Sentinel moved away from are kept: Sentinel demotes it and drops its
// clients when it next sees it, within its 10 s INFO period.
const retireWithin = 15

// retirePoll is how often retire looks at the old links' wires.
const retirePoll = 100 * time.Millisecond

// anyWire reports whether one of links has a live wire.
func anyWire(links []*engine.Link) bool {
	for _, l := range links {
		if l.Current() != nil {
			return true
		}
	}
	return false
}
