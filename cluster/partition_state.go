package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/engine"
	"github.com/shardcast/shardcast/internal/resp"
	"github.com/shardcast/shardcast/internal/subconn"
)

// partState is the broker's view of one partition: the channels wanted in
// it and the wire on which Redis confirmed them.
type partState struct {
	id int
	// turn serialises subscribe, unsubscribe and resubscribe commands of
	// this partition, so Redis sees one channel's commands in call order.
	// Whoever holds several turns takes them in ascending partition order.
	turn engine.Turn

	mu        sync.Mutex
	wanted    engine.ChannelSet
	wire      *subconn.Conn // nil while interrupted
	downSince time.Time     // start of the current interruption, if any
	// lost counts server-pushed unsubscribes seen for this partition. A
	// resubscribe reads it before sending and activates only if it is
	// unchanged once Redis confirmed: a push that overtook the activation
	// would otherwise be ignored and leave the partition silently dead.
	lost uint64
}

func newPartState(id int) *partState {
	return &partState{id: id, turn: engine.NewTurn(), wanted: engine.ChannelSet{}}
}

func (p *partState) lock(ctx context.Context, closing <-chan struct{}) error {
	return p.turn.Lock(ctx, closing)
}

func (p *partState) unlock() { p.turn.Unlock() }

// activeWire returns the wire carrying the partition, or nil.
func (p *partState) activeWire() *subconn.Conn {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.wire != nil && !p.wire.Alive() {
		return nil
	}
	return p.wire
}

// interrupt marks the partition as no longer subscribed if it is carried
// by wire (any wire when wire is nil). It returns the wanted channels when
// this starts an interruption that loses subscriptions.
func (p *partState) interrupt(wire *subconn.Conn, at time.Time) ([]string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.wire == nil || (wire != nil && p.wire != wire) {
		return nil, false
	}
	return p.dropLocked(at)
}

// interruptUnlessLocked interrupts the partition unless it is active on
// keep (a nil keep interrupts it whatever wire carries it). It returns the
// wanted channels when this starts an interruption that loses
// subscriptions. The caller holds p.mu.
func (p *partState) interruptUnlessLocked(keep *subconn.Conn, at time.Time) ([]string, bool) {
	if p.wire == nil || (keep != nil && p.wire == keep) {
		return nil, false
	}
	return p.dropLocked(at)
}

// dropLocked takes the partition off its wire, dating the interruption
// from at unless one is already under way, and returns the wanted channels
// when there are any (an interruption that loses subscriptions). The
// caller holds p.mu.
func (p *partState) dropLocked(at time.Time) ([]string, bool) {
	p.wire = nil
	if len(p.wanted) == 0 {
		return nil, false
	}
	if p.downSince.IsZero() {
		p.downSince = at
	}
	return p.snapshotLocked(), true
}

// activate records that every wanted channel is confirmed on wire. It
// returns when the interruption it ends began (zero if none).
func (p *partState) activate(wire *subconn.Conn) time.Time {
	since, _ := p.activateIf(wire, p.lostSeq())
	return since
}

// lostSeq returns the count of server-pushed unsubscribes so far.
func (p *partState) lostSeq() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lost
}

// activateIf is activate, unless a server-pushed unsubscribe arrived since
// lostSeq returned seq: then the confirmation may already be void and the
// partition stays interrupted (ok is false).
func (p *partState) activateIf(wire *subconn.Conn, seq uint64) (since time.Time, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.lost != seq || !wire.Alive() {
		// A wire that died meanwhile: its loss handler may already have
		// passed this partition, so activating it would hide the loss.
		return time.Time{}, false
	}
	p.wire = wire
	since = p.downSince
	p.downSince = time.Time{}
	return since, true
}

// noteLost records a server-pushed unsubscribe that arrived on wire and
// interrupts the partition if wire carries it. It returns the wanted
// channels when this starts an interruption.
func (p *partState) noteLost(wire *subconn.Conn, at time.Time) ([]string, bool) {
	p.mu.Lock()
	p.lost++
	p.mu.Unlock()
	if wire == nil {
		return nil, false
	}
	return p.interrupt(wire, at)
}

func (p *partState) snapshot() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.snapshotLocked()
}

func (p *partState) snapshotLocked() []string { return p.wanted.Slice() }

func (p *partState) wantedCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.wanted)
}

// missing returns the channels not yet wanted, without duplicates.
func (p *partState) missing(channels []string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.wanted.Missing(channels)
}

func (p *partState) add(channels []string, token uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.wanted.Add(channels, token)
}

// removeClaimed drops the channels whose last asker is call token.
func (p *partState) removeClaimed(channels []string, token uint64) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.wanted.RemoveClaimed(channels, token)
}

// remove drops channels from the wanted set and returns those that were
// in it.
func (p *partState) remove(channels []string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.wanted.Remove(channels)
}

// subscribe makes channels of partition p subscribed and confirmed. If the
// partition is interrupted it first re-activates it on its master; while
// its master is unreachable it waits for the topology to change, bounded
// by ctx.
func (b *Broker) subscribePartition(ctx context.Context, p *partState, channels []string, token uint64) (added []string, err error) {
	var lastErr error
	for {
		if err := p.lock(ctx, b.closing); err != nil {
			return nil, b.waitError(p, err, lastErr)
		}
		// An interrupted partition is re-activated first, even when every
		// channel is already wanted: success means Redis holds them now.
		wire := p.activeWire()
		if wire == nil {
			wire, err = b.reactivate(ctx, p)
			if err != nil {
				changed := b.changes()
				p.unlock()
				lastErr = err
				if err := b.waitChange(ctx, changed); err != nil {
					return nil, b.waitError(p, err, lastErr)
				}
				continue
			}
		}
		fresh := p.missing(channels)
		if len(fresh) > 0 {
			err = engine.FirstError(wire.Subscribe(ctx, b.keys(p.id, fresh)...))
		}
		if len(fresh) == 0 || err == nil {
			// This call is now the last to have asked for every one of
			// its channels here, so an older call's undo leaves them.
			p.add(channels, token)
			p.unlock()
			return fresh, nil
		}
		if engine.WireFailed(ctx, wire, err, b.closing) || isMoved(err) {
			// The wire died or the slot moved: nothing from this attempt
			// survives on the right node. Wait for the topology to settle.
			if isMoved(err) {
				b.requestRefresh()
			}
			b.interrupt(p, wire, err)
			changed := b.changes()
			p.unlock()
			lastErr = err
			if err := b.waitChange(ctx, changed); err != nil {
				return nil, b.waitError(p, err, lastErr)
			}
			continue
		}
		// Undo what may have gone through; the undo keeps the partition's
		// turn but not the caller, who gets its answer within ctx.
		b.finish(ctx, p, func(ctx context.Context) { b.rollback(ctx, wire, p.id, fresh) })
		return nil, fmt.Errorf("partition %d: %w", p.id, err)
	}
}

// reactivate resubscribes an interrupted partition's wanted channels on
// its current master. The caller holds p's turn.
func (b *Broker) reactivate(ctx context.Context, p *partState) (*subconn.Conn, error) {
	addr := b.masterAddr(p.id)
	if addr == "" {
		return nil, fmt.Errorf("slot %d has no master", b.layout.Slot(p.id))
	}
	m := b.connFor(p.id)
	var wire *subconn.Conn
	if m != nil {
		wire = m.current()
	}
	if wire == nil {
		return nil, fmt.Errorf("no connection to master %s", addr)
	}
	seq := p.lostSeq()
	if wanted := p.snapshot(); len(wanted) > 0 {
		if err := engine.FirstError(wire.Subscribe(ctx, b.keys(p.id, wanted)...)); err != nil {
			if isMoved(err) {
				b.requestRefresh()
			}
			return nil, fmt.Errorf("resubscribe on %s: %w", addr, err)
		}
	}
	since, ok := p.activateIf(wire, seq)
	if !ok {
		b.requestRefresh()
		return nil, fmt.Errorf("resubscribe on %s: %w", addr, errSlotMoved)
	}
	if !since.IsZero() {
		b.emitRestored(addr, []*partState{p}, since)
	}
	return wire, nil
}

// unsubscribePartition removes channels from partition p. With a non-zero
// token it is the undo of that Subscribe call: it removes only the
// channels no later call has asked for.
func (b *Broker) unsubscribePartition(ctx context.Context, p *partState, channels []string, token uint64) error {
	lockCtx := ctx
	if token != 0 {
		// An undo must happen even when the caller's ctx has ended; only
		// the caller's wait for it is bounded by ctx.
		lockCtx = context.WithoutCancel(ctx)
	}
	if err := p.lock(lockCtx, b.closing); err != nil {
		return err
	}
	var gone []string
	if token != 0 {
		gone = p.removeClaimed(channels, token)
	} else {
		gone = p.remove(channels)
	}
	wire := p.activeWire()
	if len(gone) == 0 || wire == nil {
		p.unlock()
		return nil // an interrupted partition holds no subscriptions
	}
	// Once started, the commands finish even if the caller's ctx ends, so
	// that Redis is not left subscribed to channels nobody wants.
	b.finish(ctx, p, func(ctx context.Context) { b.rollback(ctx, wire, p.id, gone) })
	return nil
}

// rollback unsubscribes channels of partition part on wire. A wire that
// broke or a slot that moved took the subscriptions along; any other
// failure (a refusal, a confirmation that never came) drops the wire.
func (b *Broker) rollback(ctx context.Context, wire *subconn.Conn, part int, channels []string) {
	err := engine.FirstError(wire.Unsubscribe(ctx, b.keys(part, channels)...))
	if err != nil && wire.Alive() && !isMoved(err) && (!engine.IsIOError(err) || errors.Is(err, resp.ErrProtocol)) {
		b.dropWire(wire, part, err)
	}
}

// finish hands op, which sends commands for partition p, to the broker's
// background group on behalf of a caller holding p's turn; see
// engine.Turn.Finish.
func (b *Broker) finish(ctx context.Context, p *partState, op func(context.Context)) {
	_ = p.turn.Finish(ctx, &b.background, b.ctx, b.cfg.CommandTimeout, func(ctx context.Context) error {
		op(ctx)
		return nil
	})
}

// dropWire closes a live wire on which an unsubscribe failed: Redis may
// still hold channels the broker no longer wants, and only a new wire,
// resubscribed from the wanted sets, is sure not to deliver them. The
// master's goroutine reports the interruption and reconnects.
func (b *Broker) dropWire(wire *subconn.Conn, part int, err error) {
	b.log.Warn("shardcast: unsubscribe failed; reconnecting the master's subscribe connection", "partition", part, "err", err)
	wire.Close()
}

// keys turns one partition's channels into wire keys, cut into commands of
// at most SubscribeBatch keys. Every command holds a single slot.
func (b *Broker) keys(part int, channels []string) [][]string {
	keys := make([]string, len(channels))
	for i, ch := range channels {
		keys[i] = b.layout.PartitionKey(part, ch)
	}
	cmds := shardcast.PlanCommands(shardcast.Group{Key: part, Channels: keys}, b.cfg.SubscribeBatch)
	out := make([][]string, len(cmds))
	for i, c := range cmds {
		out[i] = c.Channels
	}
	return out
}

func (b *Broker) waitError(p *partState, err, last error) error {
	if errors.Is(err, shardcast.ErrClosed) {
		return err
	}
	if last != nil {
		return fmt.Errorf("partition %d (slot %d): %w (last error: %v)", p.id, b.layout.Slot(p.id), err, last)
	}
	return fmt.Errorf("partition %d (slot %d): %w", p.id, b.layout.Slot(p.id), err)
}

func isMoved(err error) bool {
	se, ok := resp.IsServerError(err)
	return ok && se.IsMoved()
}
