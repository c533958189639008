package cluster

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/engine"
	"github.com/shardcast/shardcast/internal/pubconn"
)

// stallHolds keeps publishes away from a master whose publishing
// connection stalled: its oldest command went unanswered for longer than
// HealthInterval, so the master may be frozen, and a frozen master may be
// failed over while it sleeps. Once it wakes it runs what was queued to it
// and, demoted within milliseconds, goes on accepting SPUBLISH as a
// replica of its successor (Redis 7.0): it acknowledges them and relays
// them over the cluster bus late, or, while the cluster still counts it
// as failed, not at all. A publisher still routed to it would then lose
// or reorder messages it was told were published. So a stalled master's
// publishes wait until the slot map, read from another master, either
// still names it once it answers again (it was only slow: they go ahead)
// or names its successor (they go there), bounded by HealthTimeout.
type stallHolds struct {
	n     atomic.Int32 // len(holds): publishes skip the lock while it is 0
	mu    sync.Mutex
	holds map[*pubconn.Pub]chan struct{} // closed when the hold ends
	work  engine.Background              // the checks; teardown waits for them
}

// holdOf returns the channel a publish to pub must wait on, or nil when
// pub is not held.
func (b *Broker) holdOf(pub *pubconn.Pub) <-chan struct{} {
	s := &b.stalls
	if s.n.Load() == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.holds[pub]
}

// awaitRoute returns partition p's publishing connection once it is not
// held, re-read after a hold; ctx ending first is reported as not sent.
func (b *Broker) awaitRoute(ctx context.Context, p int) (*pubconn.Pub, error) {
	pub := b.routeOf(p)
	for pub != nil {
		hold := b.holdOf(pub)
		if hold == nil {
			return pub, nil
		}
		select {
		case <-hold:
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: waiting for a stalled master's role: %w", shardcast.ErrNotSent, ctx.Err())
		case <-b.core.Closing():
			return nil, shardcast.ErrClosed
		}
		pub = b.routeOf(p)
	}
	return nil, nil
}

// stalled is pub's stall hook: it holds pub's publishes and starts the
// check that ends the hold. It does not block.
func (b *Broker) stalled(pub *pubconn.Pub) {
	s := &b.stalls
	s.mu.Lock()
	if s.holds == nil {
		s.holds = make(map[*pubconn.Pub]chan struct{})
	}
	if _, ok := s.holds[pub]; ok {
		s.mu.Unlock()
		return
	}
	done := make(chan struct{})
	s.holds[pub] = done
	s.n.Store(int32(len(s.holds)))
	s.mu.Unlock()
	b.core.Log.Info("shardcast: publishing connection stalled; holding its publishes until the slot map confirms its master",
		"node", pub.Addr(), "after", b.cfg.Conn.HealthInterval)
	release := func() {
		s.mu.Lock()
		delete(s.holds, pub)
		s.n.Store(int32(len(s.holds)))
		s.mu.Unlock()
		close(done)
	}
	if !s.work.Go(func() { defer release(); b.confirmMaster(pub) }) {
		release() // closing
	}
}

// confirmMaster returns once pub's node answers again and the slot map,
// read from another master, still names it for its partitions (it was
// only slow), or once the broker's route has moved them away (it was
// failed over: the map names its successor, and the maintenance loop is
// asked to apply it), or after HealthTimeout.
func (b *Broker) confirmMaster(pub *pubconn.Pub) {
	ctx, cancel := context.WithTimeout(b.core.Ctx(), b.cfg.Conn.HealthTimeout)
	defer cancel()
	addr := pub.Addr()
	for {
		parts := b.partitionsOf(addr)
		if len(parts) == 0 {
			return // the route moved on
		}
		// A PING queued behind the stalled commands is answered once the
		// node runs again.
		pctx, pcancel := context.WithTimeout(ctx, b.cfg.Conn.RecoveryInterval)
		awake := pub.Ping(pctx) == nil
		pcancel()
		m, asked, ok := b.slotsElsewhere(ctx, addr)
		still := ok
		for _, p := range parts {
			if owner, _ := m.MasterOf(b.layout.Slot(p)); ok && owner != addr {
				still = false
				break
			}
		}
		switch {
		case ok && !still:
			b.core.RequestRefresh() // the maintenance loop moves the route
		case awake && (still || asked == 0):
			return // it answers, and no other master says it lost its slots
		}
		if ctx.Err() != nil {
			return
		}
		t := time.NewTimer(b.cfg.Conn.RecoveryInterval / 5)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
	}
}

// slotsElsewhere reads the slot map from the first master other than addr
// that answers within a RecoveryInterval; ok is false when none does, and
// asked is how many there were to ask.
func (b *Broker) slotsElsewhere(ctx context.Context, addr string) (m shardcast.SlotMap, asked int, ok bool) {
	b.mu.Lock()
	others := make([]*pubconn.Pub, 0, len(b.pubs))
	for a, p := range b.pubs {
		if a != addr {
			others = append(others, p)
		}
	}
	b.mu.Unlock()
	for _, p := range others {
		qctx, cancel := context.WithTimeout(ctx, b.cfg.Conn.RecoveryInterval)
		m, err := b.slotsFrom(qctx, p)
		cancel()
		if err == nil {
			return m, len(others), true
		}
	}
	return shardcast.SlotMap{}, len(others), false
}
