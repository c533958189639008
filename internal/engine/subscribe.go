package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/resp"
	"github.com/shardcast/shardcast/internal/subconn"
)

// Routing is what a re-layout layer tells the core about Subscribe and
// Unsubscribe calls (SetRouting): Groups groups a call's channels by the
// paths they are wanted on (during a re-layout, a moving channel on its
// path under each layout), and Run runs the call, op, so that the routing
// cannot change between the grouping and the call's end, again if a
// re-layout step cut it short.
type Routing interface {
	Groups(channels []string) []shardcast.Group
	Run(ctx context.Context, op func(ctx context.Context) error) error
}

// SetRouting installs the re-layout layer's hook, before the broker is
// used; without one, calls group channels by Router.PathOf.
func (c *Core) SetRouting(r Routing) { c.routing = r }

// grouped runs op on channels grouped by path (see Routing).
func (c *Core) grouped(ctx context.Context, channels []string, op func(context.Context, []shardcast.Group) error) error {
	if c.routing == nil {
		return op(ctx, shardcast.GroupByPartition(channels, c.router.PathOf))
	}
	return c.routing.Run(ctx, func(ctx context.Context) error { return op(ctx, c.routing.Groups(channels)) })
}

// Subscribe is Broker.Subscribe: it subscribes channels and returns once
// Redis confirmed every one. While a path's node is unreachable (a
// reconnect, a failover, a slot move) it waits, bounded by ctx. On error no
// channel of this call is left newly subscribed, unless a later Subscribe
// asked for it meanwhile: the channels it added on paths that succeeded
// are unsubscribed before it returns (bounded by CommandTimeout, even once
// ctx has ended), and the undo of a path whose commands ctx cut short
// finishes in the background, ahead of any later call for that path.
func (c *Core) Subscribe(ctx context.Context, channels []string) error {
	if err := CheckChannels(ctx, c.closed.Load(), channels); err != nil {
		return err
	}
	if c.Pool == nil {
		return shardcast.ErrNoHandler
	}
	return c.grouped(ctx, channels, c.SubscribeGroups)
}

// SubscribeGroups is Subscribe with the channels already grouped by path
// (Group.Key): a channel may be wanted on several paths at once, which an
// online re-layout needs (docs/RELAYOUT.md). The caller checked the
// channels and that the broker has a Handler.
func (c *Core) SubscribeGroups(ctx context.Context, groups []shardcast.Group) error {
	token := c.calls.Add(1)
	added := make([][]string, len(groups))
	// A call on one path has succeeded once that path has; a call on
	// several claims the channels it found already wanted only once every
	// path has (see subscribePath).
	whole := len(groups) == 1
	errs := c.fanOut(groups, func(i int, g shardcast.Group) (err error) {
		added[i], err = c.subscribePath(ctx, c.Paths[g.Key], g.Channels, token, whole)
		return err
	})
	err := errors.Join(errs...)
	if err == nil && !whole {
		errs = c.fanOut(groups, func(i int, g shardcast.Group) error {
			if len(added[i]) == len(g.Channels) {
				return nil // every channel was this call's own
			}
			more, err := c.subscribePath(ctx, c.Paths[g.Key], g.Channels, token, true)
			added[i] = append(added[i], more...)
			return err
		})
		err = errors.Join(errs...)
	}
	if err == nil {
		return nil
	}
	// Undo the paths that succeeded so the call has no partial effect,
	// and wait for it even when ctx has ended (the undo is bounded by
	// CommandTimeout): the caller must not see them subscribed after an
	// error. Channels subscribed before the call stay.
	undo := context.WithoutCancel(ctx)
	for i, g := range groups {
		if errs[i] == nil && len(added[i]) > 0 {
			_ = c.unsubscribePath(undo, c.Paths[g.Key], added[i], token)
		}
	}
	if c.closed.Load() {
		// Close cut the call short: its connections' errors are Close's
		// doing, and ErrClosed says so.
		return shardcast.ErrClosed
	}
	return fmt.Errorf("shardcast: subscribe: %w", err)
}

// Unsubscribe is Broker.Unsubscribe: unknown channels are ignored. The
// channels leave the broker's subscriptions at once; if ctx ends before
// Redis confirmed, the call returns nil and the command completes in the
// background, still ahead of any later call for these channels.
func (c *Core) Unsubscribe(ctx context.Context, channels []string) error {
	if err := CheckChannels(ctx, c.closed.Load(), channels); err != nil {
		return err
	}
	if c.Pool == nil {
		return nil
	}
	return c.grouped(ctx, channels, c.UnsubscribeGroups)
}

// UnsubscribeGroups is Unsubscribe with the channels already grouped by
// path (see SubscribeGroups).
func (c *Core) UnsubscribeGroups(ctx context.Context, groups []shardcast.Group) error {
	if c.Pool == nil {
		return nil
	}
	errs := c.fanOut(groups, func(_ int, g shardcast.Group) error {
		return c.unsubscribePath(ctx, c.Paths[g.Key], g.Channels, 0)
	})
	if err := errors.Join(errs...); err != nil {
		if c.closed.Load() {
			return shardcast.ErrClosed
		}
		return fmt.Errorf("shardcast: unsubscribe: %w", err)
	}
	return nil
}

// fanOut runs f for every group at once and returns their errors.
func (c *Core) fanOut(groups []shardcast.Group, f func(i int, g shardcast.Group) error) []error {
	errs := make([]error, len(groups))
	if len(groups) == 1 {
		errs[0] = f(0, groups[0])
		return errs
	}
	var wg sync.WaitGroup
	for i, g := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f(i, g)
		}()
	}
	wg.Wait()
	return errs
}

// subscribePath makes channels of path p subscribed and confirmed. If the
// path is interrupted it first re-activates it on its link; while the
// link is down it waits for a change, bounded by ctx.
//
// The channels it adds carry token, the call's, so that the call's undo
// removes them unless a later call has claimed them since. With claim set
// it also claims the channels that were already wanted: the call is then
// the last to have asked for all of them, and the undo of an earlier call
// that added one leaves it. A call on several paths claims only once every
// path succeeded (SubscribeGroups runs it again with claim set, which also
// subscribes anew what an earlier call's undo removed meanwhile): claimed
// sooner, a channel whose adder and claimer both failed stayed wanted,
// each undo leaving it to the other.
func (c *Core) subscribePath(ctx context.Context, p *Path, channels []string, token uint64, claim bool) (added []string, err error) {
	var lastErr error
	voided := 0
	for {
		if err := p.lock(ctx, c.closing); err != nil {
			return nil, c.waitError(p, err, lastErr)
		}
		// Taken before the link's state is read, so that a connection
		// made between that read and the wait below still wakes it.
		changed := c.changes()
		// An interrupted path is re-activated first, even when every
		// channel is already wanted: success means Redis holds them now.
		wire := p.ActiveWire()
		if wire == nil {
			wire, err = c.reactivate(ctx, p)
			if err != nil {
				lastErr = err
				if err := c.releaseAndWait(ctx, p, changed); err != nil {
					return nil, c.waitError(p, err, lastErr)
				}
				continue
			}
		}
		fresh := p.missing(channels)
		seq := p.lostSeq()
		send := fresh
		if len(fresh) > 0 {
			if p.probe != nil && p.WantedCount() == 0 {
				// The path's first channel: its probe rides along.
				send = append(fresh[:len(fresh):len(fresh)], p.probe.channel)
			}
			err = FirstError(wire.Subscribe(commandContext(ctx), c.commands(p.ID, send)...))
		}
		if len(fresh) == 0 || err == nil {
			// The channels are wanted now, those this call added (and,
			// with claim, all of them) on its behalf. Unless the path
			// lost its wire or a slot move overtook the confirmation
			// meanwhile: an interruption that began before the channels
			// were wanted would not name them.
			tokened := fresh
			if claim {
				tokened = channels
			}
			if p.addIfActive(wire, seq, tokened, token) {
				p.unlock()
				return fresh, nil
			}
			// Try again at once, on the path's carrier as the router
			// knows it (after a slot move the old node answers MOVED,
			// handled below); after a few voided attempts, only once
			// something changed.
			c.RequestRefresh()
			lastErr = errVoided
			if voided++; voided <= maxVoidedRetries {
				p.unlock()
				continue
			}
			if err := c.releaseAndWait(ctx, p, changed); err != nil {
				return nil, c.waitError(p, err, lastErr)
			}
			continue
		}
		if WireFailed(commandContext(ctx), wire, err, c.closing) || IsMoved(err) {
			// The wire died or the slot moved: nothing from this attempt
			// survives on the right node. Wait for it to settle.
			if IsMoved(err) {
				c.RequestRefresh()
			}
			c.interruptPath(p, wire, err)
			lastErr = err
			if err := c.releaseAndWait(ctx, p, changed); err != nil {
				return nil, c.waitError(p, err, lastErr)
			}
			continue
		}
		// Redis refused, or ctx ended with commands possibly in flight:
		// undo what may have gone through (the probe too, if it rode
		// along: the path stays empty). The undo keeps the path's turn
		// but not the caller, who gets its answer within ctx.
		c.finish(ctx, p, func(ctx context.Context) { c.rollback(ctx, wire, p.ID, send) })
		return nil, fmt.Errorf("%s: %w", c.router.Describe(p.ID), err)
	}
}

// releaseAndWait gives up p's turn and waits, bounded by ctx, for the
// change of connections or topology that closes changed (taken before the
// caller looked at the state it waits to see change).
func (c *Core) releaseAndWait(ctx context.Context, p *Path, changed <-chan struct{}) error {
	p.unlock()
	return c.waitChange(ctx, changed)
}

// reactivate resubscribes an interrupted path's wanted channels on the
// link that carries it now. The caller holds p's turn.
func (c *Core) reactivate(ctx context.Context, p *Path) (*subconn.Conn, error) {
	l := c.router.Carrier(p.ID)
	if l == nil {
		return nil, errors.New("no node serves it")
	}
	wire := l.Current()
	if wire == nil {
		return nil, fmt.Errorf("no connection to %s", l.Addr)
	}
	if l.Unconfirmed() {
		return nil, fmt.Errorf("%s reconnected; waiting for the topology to confirm that it still serves the path", l.Addr)
	}
	seq := p.lostSeq()
	p.setOwner(l)
	if wanted := p.subscribed(); len(wanted) > 0 {
		if err := FirstError(wire.Subscribe(commandContext(ctx), c.commands(p.ID, wanted)...)); err != nil {
			if IsMoved(err) {
				c.RequestRefresh()
			}
			return nil, fmt.Errorf("resubscribe on %s: %w", l.Addr, err)
		}
	}
	c.ledger.mu.Lock()
	defer c.ledger.mu.Unlock()
	since, ok := p.activateIf(wire, seq, l.Relayed.Load())
	if !ok {
		c.RequestRefresh()
		return nil, fmt.Errorf("resubscribe on %s: %w", l.Addr, errVoided)
	}
	if !since.IsZero() {
		c.ledger.restored(l.Addr, []*Path{p}, [][]string{p.Wanted()}, since)
	}
	return wire, nil
}

// maxVoidedRetries is how many times in a row a Subscribe whose
// confirmation was voided tries again at once.
const maxVoidedRetries = 3

// errVoided reports a resubscribe whose confirmation a server-pushed
// unsubscribe (a slot move) or a lost wire overtook.
var errVoided = errors.New("confirmation voided by a slot move or a lost connection")

// unsubscribePath removes channels from path p. With a non-zero token it
// is the undo of that Subscribe call: it removes only the channels no
// later call has asked for, and it happens even when the caller's ctx has
// ended (only the caller's wait is bounded by ctx).
func (c *Core) unsubscribePath(ctx context.Context, p *Path, channels []string, token uint64) error {
	lockCtx := ctx
	if token != 0 {
		lockCtx = context.WithoutCancel(ctx)
	}
	if err := p.lock(lockCtx, c.closing); err != nil {
		return err
	}
	gone := p.remove(channels, token)
	left := gone // the channels that leave, without the probe's
	if len(gone) > 0 && p.probe != nil && p.WantedCount() == 0 {
		gone = append(gone, p.probe.channel) // the path's last channel: its probe goes too
		p.probe.forget()                     // and one in flight with it
	}
	wire := p.ActiveWire()
	if len(left) > 0 && wire == nil {
		// An interrupted path holds no subscriptions; the channels that
		// leave it leave its window too (see ledger.left).
		node := ""
		if l := c.router.Carrier(p.ID); l != nil {
			node = l.Addr
		}
		c.ledger.mu.Lock()
		c.ledger.left(node, p, left, p.openSince())
		c.ledger.mu.Unlock()
	}
	if len(gone) == 0 || wire == nil {
		p.unlock()
		return nil
	}
	// Once started, the commands finish even if the caller's ctx ends, so
	// that Redis is not left subscribed to channels nobody wants.
	c.finish(ctx, p, func(ctx context.Context) { c.rollback(ctx, wire, p.ID, gone) })
	return nil
}

// rollback unsubscribes channels of path part on wire. A wire that broke
// or a slot that moved took the subscriptions along; any other failure (a
// refusal, a confirmation that never came) drops the wire: Redis may still
// hold channels the broker no longer wants, and only a new wire,
// resubscribed from the wanted sets, is sure not to deliver them. The
// link reports the interruption and reconnects.
func (c *Core) rollback(ctx context.Context, wire *subconn.Conn, part int, channels []string) {
	err := FirstError(wire.Unsubscribe(ctx, c.commands(part, channels)...))
	if err != nil && wire.Alive() && !IsMoved(err) && (!IsIOError(err) || errors.Is(err, resp.ErrProtocol)) {
		node := ""
		if l := c.router.Carrier(part); l != nil {
			node = l.Addr
		}
		c.Log.Warn("shardcast: unsubscribe failed; dropping the subscribe connection to reconnect clean", "node", node,
			"path", c.router.Describe(part), "err", err)
		wire.Close()
	}
}

// finish hands op, which sends commands for path p, to the background
// group on behalf of a caller holding p's turn; see Turn.Finish.
func (c *Core) finish(ctx context.Context, p *Path, op func(context.Context)) {
	_ = p.turn.Finish(ctx, &c.background, c.ctx, c.Conn.CommandTimeout, func(ctx context.Context) error {
		op(ctx)
		return nil
	})
}

// commands turns one path's channels into wire keys, cut into commands of
// at most SubscribeBatch keys (each holds a single slot in a cluster).
func (c *Core) commands(p int, channels []string) [][]string {
	prefix := c.router.KeyPrefix(p)
	keys := make([]string, len(channels))
	for i, ch := range channels {
		keys[i] = prefix + ch
	}
	cmds := shardcast.Group{Key: p, Channels: keys}.Batches(c.Options.SubscribeBatch)
	out := make([][]string, len(cmds))
	for i, cmd := range cmds {
		out[i] = cmd.Channels
	}
	return out
}

func (c *Core) waitError(p *Path, err, last error) error {
	if errors.Is(err, shardcast.ErrClosed) {
		return err
	}
	if last != nil {
		return fmt.Errorf("%s: %w (last error: %v)", c.router.Describe(p.ID), err, last)
	}
	return fmt.Errorf("%s: %w", c.router.Describe(p.ID), err)
}

// interruptPath marks p as interrupted after a failed command on wire,
// from its carrier's last proof of health: a Subscribe waiting on a
// frozen server learns of the loss only when the link gives the wire up,
// a HealthTimeout after the freeze, and may report it before the link
// does (which dates it so too).
func (c *Core) interruptPath(p *Path, wire *subconn.Conn, cause error) {
	since := time.Now()
	addr := ""
	if l := c.router.Carrier(p.ID); l != nil {
		addr = l.Addr
		if h := l.LastHealthy(); !h.IsZero() && h.Before(since) {
			since = h
		}
	}
	c.ledger.mu.Lock()
	defer c.ledger.mu.Unlock()
	if chans, ok := p.interrupt(wire, since); ok {
		c.ledger.interrupted(addr, []*Path{p}, [][]string{chans}, since, cause)
	}
}

// NoteLost handles a server-pushed unsubscribe of path p's channels on
// link l: the slot moved away from l's node at some point after l last
// proved healthy. It interrupts p and asks for a topology refresh.
func (c *Core) NoteLost(l *Link, p int, cause error) {
	path := c.Paths[p]
	since := time.Now()
	if h := l.LastHealthy(); !h.IsZero() && h.Before(since) {
		since = h
	}
	c.ledger.mu.Lock()
	if chans, ok := path.noteLost(l.Current(), since); ok {
		c.ledger.interrupted(l.Addr, []*Path{path}, [][]string{chans}, since, cause)
	}
	c.ledger.mu.Unlock()
	c.RequestRefresh()
}

// IsMoved reports whether err is Redis's MOVED redirection.
func IsMoved(err error) bool {
	se, ok := resp.IsServerError(err)
	return ok && se.IsMoved()
}
