package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/hot"
	"github.com/shardcast/shardcast/internal/pool"
	"github.com/shardcast/shardcast/internal/subconn"
)

// Link supervises one subscribe connection to one Redis node, however
// many paths it carries: it dials, resubscribes the paths it carries
// once connected, pings the wire to catch a frozen server, reports a loss
// and reconnects with backoff until it is stopped.
type Link struct {
	c *Core
	// Addr is the node's host:port, as events name it.
	Addr string
	// Index tells a node's links apart when Conn.SubscribeConns > 1.
	Index int
	// Relayed is set while the node gets its paths' messages relayed by
	// another node (a cluster replica, from its master over the bus): a
	// subscribe it confirms proves nothing until a delivery probe comes
	// back, so a path it restores is reported Restored only then.
	Relayed atomic.Bool

	dial  subconn.Dialer
	hooks subconn.Hooks
	// feeder hands this link's messages to the worker pool (nil on a
	// publish-only broker). Only the wire's reader goroutine uses it, and
	// a link runs one wire at a time.
	feeder *pool.Feeder
	// hot picks the messages read on this link that hot-channel detection
	// samples; only the wire's reader uses it, like feeder.
	hot hot.Sampler

	mu   sync.Mutex
	wire *subconn.Conn // nil while down

	// slow is set while a health ping has been unanswered for a whole
	// HealthInterval: the engine then checks its topology at
	// RecoveryInterval (a frozen master is usually replaced by its replica
	// before the ping times out).
	slow atomic.Bool
	// syncing is set while a heal runs a sync of this link, so that heals
	// never pile up behind a slow node.
	syncing atomic.Bool
	// healthyAt is when the wire last proved alive, in Unix nanoseconds:
	// when it connected, or when a ping that was answered was sent (the
	// server ran the PING after that, and a slot it lost before would have
	// pushed its sunsubscribe ahead of the PONG). Messages are lost from
	// then on, not from when the broker noticed.
	healthyAt atomic.Int64
	// relayedAt is, in Unix nanoseconds, the publish time of the newest
	// message read on the wire, or when the wire connected: on a Relayed
	// node a PONG proves the connection, not that the relay caught up, so
	// what the master took before the PONG may still be on its way, and a
	// loss dates from the newest message the relay brought (see
	// LastHealthy).
	relayedAt atomic.Int64
	// unconfirmedAt is when the link reconnected after losing its wire,
	// in Unix nanoseconds, while the engine has yet to confirm that the
	// node still serves what the link carries (0 once confirmed, or when
	// the engine does not ask: see CoreConfig.ConfirmReconnects). Until
	// then nothing is subscribed on the wire: a cluster master that was
	// killed and restarted loads its old slot table and takes SSUBSCRIBE
	// for the slots its promoted replica now owns until the cluster bus
	// tells it otherwise, and a partition subscribed there in that moment
	// would be reported Restored while its messages go to the replica.
	unconfirmedAt atomic.Int64

	// ctx ends when the link is stopped or the broker closes; it bounds
	// every dial, ping and resubscribe so that stopping never waits for a
	// frozen server.
	ctx     context.Context
	cancel  context.CancelFunc
	done    chan struct{}
	started atomic.Bool

	// Counters for NodeStats.
	received, dropped, badFrames, stale, reconnects, resubscribeCommands atomic.Uint64
	// downMu guards the outage clock: down totals the outages, downAt
	// (Unix ns, 0 while up) starts the open one.
	downMu sync.Mutex
	down   spanTotal
	downAt int64
}

// NewLink returns a link to the node d reaches. Messages read on it go,
// with their wire key, to the function onMessage returns for the link: the
// engine's own, which the wire calls directly, so that a message goes from
// the wire down through the engine, the kit and the pool to the Handler.
// onLost, if set, gets the keys the server unsubscribed on its own
// (sharded Pub/Sub after a slot move). Start runs it.
func (c *Core) NewLink(d subconn.Dialer, index int, onMessage func(l *Link) func(key string, payload []byte), onLost func(l *Link, key string)) *Link {
	ctx, cancel := context.WithCancel(c.ctx)
	l := &Link{c: c, Addr: d.Addr, Index: index, dial: d, ctx: ctx, cancel: cancel, done: make(chan struct{}), hot: c.hot.Sampler()}
	l.hooks.OnMessage = onMessage(l)
	if c.Pool != nil {
		l.feeder = c.Pool.NewFeeder()
		l.hooks.OnIdle = l.feeder.Flush
	}
	if onLost != nil {
		l.hooks.OnLost = func(key string) { onLost(l, key) }
	}
	return l
}

// Start runs the link's goroutine; Stop ends it.
func (l *Link) Start() {
	l.started.Store(true)
	go l.run()
}

// Stop ends the link's goroutine and closes its wire, and waits for both.
// Paths still active on the wire are reported interrupted (see
// abandoned).
func (l *Link) Stop() {
	l.cancel()
	if l.started.Load() {
		<-l.done
	}
}

// Current returns the live wire, or nil.
func (l *Link) Current() *subconn.Conn {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.wire != nil && !l.wire.Alive() {
		return nil
	}
	return l.wire
}

// Unconfirmed reports whether the link reconnected and waits for the
// engine to confirm its node (see Confirm).
func (l *Link) Unconfirmed() bool { return l.unconfirmedAt.Load() != 0 }

// Confirm lets the link subscribe on its wire again, if it reconnected
// no later than asOf: the engine learned, from a source it asked at asOf
// or later other than the node itself, that the node still serves what
// the link carries. The next heal resubscribes the link's paths.
func (l *Link) Confirm(asOf time.Time) {
	for {
		at := l.unconfirmedAt.Load()
		if at == 0 || at > asOf.UnixNano() {
			return
		}
		if l.unconfirmedAt.CompareAndSwap(at, 0) {
			l.c.signalChange()
			return
		}
	}
}

// Slow reports whether a health ping has been unanswered for a whole
// HealthInterval.
func (l *Link) Slow() bool { return l.slow.Load() }

// LastHealthy returns when the wire last proved alive (zero before the
// first connection): messages may be lost from then on. On a Relayed node
// it is no later than the publish time of the newest message read on the
// wire (or its connection, before any): the relay delivers in order, so
// everything published before that one reached the wire, and nothing
// later is proven.
func (l *Link) LastHealthy() time.Time {
	n := l.healthyAt.Load()
	if n == 0 {
		return time.Time{}
	}
	if r := l.relayedAt.Load(); l.Relayed.Load() && r != 0 && r < n {
		n = r
	}
	return time.Unix(0, n)
}

// relayed records that a message published at ns was read on the wire.
func (l *Link) relayed(ns int64) {
	for {
		r := l.relayedAt.Load()
		if ns <= r || l.relayedAt.CompareAndSwap(r, ns) {
			return
		}
	}
}

func (l *Link) run() {
	defer close(l.done)
	c := l.c
	connected := false
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			t := time.NewTimer(Backoff(attempt-1, c.Conn.ReconnectMin, c.Conn.ReconnectMax))
			select {
			case <-t.C:
			case <-l.ctx.Done():
				t.Stop()
				return
			}
		}
		wire, err := l.open()
		if err != nil {
			if l.ctx.Err() != nil {
				return
			}
			c.Log.Debug("shardcast: connect failed", "node", l.Addr, "attempt", attempt, "err", err)
			if attempt%10 == 0 { // the first failure, then every tenth
				c.Emitter.Emit(shardcast.Event{Kind: shardcast.EventError, Shard: l.Addr, Since: time.Now(),
					Err: fmt.Errorf("subscribe connection: connect attempt %d failed (retrying with backoff): %w", attempt+1, err)})
			}
			continue
		}
		connectedAt := time.Now()
		if connected {
			c.reconnects.Add(1)
			l.reconnects.Add(1)
			if c.confirmReconnects {
				// Before the wire is visible, so that no heal subscribes
				// on it first.
				l.unconfirmedAt.Store(connectedAt.UnixNano())
			}
		}
		l.outageEnded(connectedAt)
		connected = true
		l.relayedAt.Store(connectedAt.UnixNano())
		l.healthyAt.Store(connectedAt.UnixNano())
		l.mu.Lock()
		l.wire = wire
		l.mu.Unlock()
		c.signalChange()
		if l.Unconfirmed() {
			c.RequestRefresh() // its confirmation; a heal then resubscribes
		} else {
			c.Sync(l, wire, c.router.Carried(l))
		}
		if !l.watch(wire) {
			return
		}
		// Backoff starts over only after a connection that stayed up a
		// while: one the server drops at once (an output buffer limit, a
		// proxy) must not turn into a hot loop of full resubscribes.
		if time.Since(connectedAt) >= c.Conn.ReconnectMax {
			attempt = -1
		}
	}
}

func (l *Link) open() (*subconn.Conn, error) {
	ctx, cancel := context.WithTimeout(l.ctx, l.c.Conn.DialTimeout)
	defer cancel()
	return subconn.Open(ctx, l.dial, l.c.mode, l.hooks)
}

// watch pings the wire until it dies (it then reports the loss and returns
// true) or the link is stopped (false). A ping runs on its own goroutine
// so that one still unanswered after a whole HealthInterval can raise
// suspicion (see slow) long before HealthTimeout declares the wire dead.
// A ping that timed out while the wire kept reading does not: it waited
// behind replies to a long pipeline of commands (a Subscribe of a million
// channels), and dropping the wire would only resend them into the same
// backlog.
func (l *Link) watch(wire *subconn.Conn) bool {
	c := l.c
	tick := time.NewTicker(c.Conn.HealthInterval)
	defer tick.Stop()
	pinged := make(chan error, 1)
	var pingCancel context.CancelFunc // non-nil while a ping is out
	var pingSent time.Time
	var readsAtPing uint64
	// dropped is why the link closed the wire itself, if it did: the
	// wire's own error then only says it was closed.
	var dropped error
	endPing := func() {
		if pingCancel != nil {
			pingCancel()
			<-pinged
			pingCancel = nil
		}
		l.slow.Store(false)
	}
	for {
		select {
		case <-l.ctx.Done():
			endPing()
			l.mu.Lock()
			l.wire = nil
			l.mu.Unlock()
			wire.Close()
			l.abandoned(wire)
			return false
		case <-wire.Done():
			// The loss dates from the wire's last proof of health, not
			// from now: a server that drops a subscriber (its output
			// buffer limit) discards what it had queued for it, published
			// before the broker reads the end of the stream. This may
			// over-report a clean close by up to a HealthInterval.
			since := l.LastHealthy()
			if since.IsZero() {
				since = time.Now()
			}
			endPing()
			l.lost(wire, since, dropped)
			return true
		case err := <-pinged:
			pingCancel()
			pingCancel = nil
			if err == nil {
				l.slow.Store(false)
				l.healthyAt.Store(pingSent.UnixNano())
			} else if wire.Reads() != readsAtPing {
				c.Log.Debug("shardcast: ping late behind replies still arriving", "node", l.Addr, "err", err)
			} else if wire.Alive() && l.ctx.Err() == nil {
				l.slow.Store(true) // the loss below dates from the last answer
				// The EventInterrupted that follows reports it, with
				// this cause.
				dropped = fmt.Errorf("no answer to a health PING within %v (Conn.HealthTimeout), so the broker dropped the connection: %w",
					c.Conn.HealthTimeout, err)
				wire.Close()
			}
		case <-tick.C:
			if pingCancel != nil {
				if !l.slow.Swap(true) {
					c.Log.Warn("shardcast: health PING unanswered for a whole Conn.HealthInterval; checking the topology",
						"node", l.Addr, "waited", time.Since(pingSent).Round(time.Millisecond), "timeout", c.Conn.HealthTimeout)
					c.RequestRefresh()
				}
				continue
			}
			pingSent, readsAtPing = time.Now(), wire.Reads()
			ctx, cancel := context.WithTimeout(l.ctx, c.Conn.HealthTimeout)
			go func() { pinged <- wire.Ping(ctx) }()
			pingCancel = cancel
		}
	}
}

// lost marks every path carried by wire as interrupted, reports them and
// asks the engine to check its topology: the node may have failed over.
// dropped is why the link closed the wire itself, nil when it did not.
func (l *Link) lost(wire *subconn.Conn, since time.Time, dropped error) {
	c := l.c
	l.mu.Lock()
	l.wire = nil
	l.mu.Unlock()
	l.outageBegan(since)
	err := lostCause(wire.Err(), dropped)
	wire.Close()
	c.trouble(l.Addr)
	if l.interruptPaths(wire, since, err) == 0 {
		// No subscription went with it, so no event reports it.
		c.Log.Info("shardcast: subscribe connection lost; it carried no subscriptions; reconnecting", "node", l.Addr, "err", err)
	}
	c.RequestRefresh()
	c.signalChange()
}

// lostCause says what ended a subscribe connection, for the events and
// the log: the wire's own error ("EOF") says neither which connection it
// was nor what happened to it. dropped, when set, is why the broker
// closed it. The wire's error stays in the chain.
func lostCause(err, dropped error) error {
	switch {
	case dropped != nil:
		return fmt.Errorf("subscribe connection: %w", dropped)
	case err == nil:
		return errors.New("subscribe connection closed")
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("subscribe connection closed by the server (it stopped, restarted, or dropped this client): %w", err)
	case errors.Is(err, subconn.ErrClosed):
		return fmt.Errorf("subscribe connection closed by the broker after a failed command: %w", err)
	}
	return fmt.Errorf("subscribe connection lost: %w", err)
}

// errLinkStopped is the Err of the EventInterrupted for paths still
// active on the wire of a link the engine stopped (see abandoned).
var errLinkStopped = errors.New("shardcast: connection closed: the node no longer carries these subscriptions")

// abandoned runs once the wire of a link the engine stopped (its node left
// the topology) is closed, unless the broker is closing: a path still
// active on it lost its subscriptions with it. Normally there is none (the
// topology change interrupted the paths it moved before it stopped the
// link), but a resubscribe on this wire confirmed after that interruption
// activates the path there again: a failed-over master restarted at once
// claims its old slots for a moment, before it learns it was replaced,
// and confirms the resubscribe it is sent meanwhile. Left active on a
// closed wire, the path would be healed on its new node without any
// report, and what its new node got meanwhile lost silently. The loss
// dates from when the wire last proved alive, as for a moved path (see
// Move.Since).
func (l *Link) abandoned(wire *subconn.Conn) {
	c := l.c
	if c.ctx.Err() != nil {
		return
	}
	since := l.LastHealthy()
	if since.IsZero() {
		since = time.Now()
	}
	if l.interruptPaths(wire, since, errLinkStopped) > 0 { // the event is the report
		c.RequestRefresh()
		c.signalChange()
	}
}

// interruptPaths interrupts every path active on wire, reports those that
// lose subscriptions in one EventInterrupted dated since with cause err
// (of the application's channels, see ledger.emitPaths), and returns how many
// lost subscriptions.
func (l *Link) interruptPaths(wire *subconn.Conn, since time.Time, err error) int {
	c := l.c
	var lost []*Path
	var lists [][]string
	c.ledger.mu.Lock()
	defer c.ledger.mu.Unlock()
	for i := range c.states {
		if !c.states[i].carriedBy(wire) {
			continue // read without the path's lock: most paths are elsewhere
		}
		p := c.Paths[i]
		if chans, ok := p.interrupt(wire, since); ok {
			lost = append(lost, p)
			lists = append(lists, chans)
		}
	}
	if len(lost) > 0 {
		c.ledger.interrupted(l.Addr, lost, lists, since, err)
	}
	return len(lost)
}

// outageBegan opens an outage at since, unless one is open.
func (l *Link) outageBegan(since time.Time) {
	l.downMu.Lock()
	defer l.downMu.Unlock()
	if l.downAt == 0 {
		l.downAt = since.UnixNano()
	}
}

// outageEnded closes the open outage, if any, at at.
func (l *Link) outageEnded(at time.Time) {
	l.downMu.Lock()
	defer l.downMu.Unlock()
	if l.downAt != 0 {
		l.down.end(time.Duration(at.UnixNano() - l.downAt))
		l.downAt = 0
	}
}

// Down returns how long the link's connection has been down in total
// since it first connected, the current outage included. It never returns
// less than it did before.
func (l *Link) Down() time.Duration {
	l.downMu.Lock()
	defer l.downMu.Unlock()
	var open time.Duration
	if l.downAt != 0 {
		open = time.Duration(time.Now().UnixNano() - l.downAt)
	}
	return l.down.read(open)
}
