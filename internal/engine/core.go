package engine

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardcast/shardcast/internal/compact"
	"github.com/shardcast/shardcast/internal/events"
	"github.com/shardcast/shardcast/internal/hot"
	"github.com/shardcast/shardcast/internal/pool"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/subconn"
)

// Router is what an engine tells the core: where a channel's path is, and
// which link carries a path now.
type Router interface {
	// PathOf returns the index in Core.Paths of the path carrying channel.
	PathOf(channel string) int
	// KeyPrefix returns what goes before a channel's name on the wire, on
	// path p: the channel's key there is KeyPrefix(p) + channel.
	KeyPrefix(p int) string
	// Carrier returns the link carrying path p now, or nil while p has no
	// node (a cluster slot without a master).
	Carrier(p int) *Link
	// Carriers returns Carrier of each path in ids, in one step: a
	// maintenance pass asks for every wanted path's, and the cluster
	// engine answers under one lock instead of one per path.
	Carriers(ids []int) []*Link
	// Carried returns the paths l carries now.
	Carried(l *Link) []int
	// Links returns every link the engine runs.
	Links() []*Link
	// Describe names path p in errors, e.g. "partition 3 (slot 1234)".
	Describe(p int) string
}

// Core is the subscribe machine one broker runs, whatever its engine:
// its paths and their wanted channels, the Subscribe and Unsubscribe
// calls with their undo, resubscribes after a loss, the inbound path to
// the worker pool, the counters, and Close. An engine supplies a Router
// and its links, and keeps only what differs: where a channel lives and,
// for a cluster, the topology.
type Core struct {
	// Options and Conn are the broker's settings, defaults applied.
	Options shardcast.Options
	Conn    shardcast.ConnOptions
	Log     *slog.Logger
	Emitter *events.Emitter
	// Pool, Inbox and Paths are nil on a publish-only broker (no Handler).
	Pool  *pool.Pool
	Inbox *Inbox
	Paths []*Path
	// states are the Paths' states, by path ID, in one array (see state).
	states []state
	// healIDs is heal's list of wanted paths, kept from one pass to the
	// next: the maintenance loop, heal's only caller, would otherwise
	// allocate one the size of every path the engine has, every pass.
	healIDs []int

	router    Router
	routing   Routing // nil: a call goes by router.PathOf
	mode      subconn.Mode
	onTrouble func(addr string)
	// probeRelaysOnly: probe relayed wires only (see StartProbes).
	probeRelaysOnly bool
	partitions      bool // paths are cluster partitions: events list them
	bank            int  // with partitions: path p is partition p % bank (0: p)
	resub           shardcast.Resubscriber
	// confirmReconnects: see CoreConfig.ConfirmReconnects.
	confirmReconnects bool

	calls, published, reconnects atomic.Uint64

	// ledger keeps the paths' loss windows and reports them.
	ledger *ledger

	// hot samples published and received messages for HotChannels; nil
	// when detection is off.
	hot *hot.Tracker

	mu      sync.Mutex
	changed chan struct{} // closed and replaced whenever state changes

	refresh chan struct{} // asks the maintenance loop for an immediate pass
	kick    chan struct{} // asks for one no sooner than RecoveryInterval after the last

	closeOnce sync.Once
	closed    atomic.Bool
	closing   chan struct{}
	// ctx ends when Close begins. It bounds the work the broker does on
	// its own, so that Close does not wait out timeouts against a server
	// that stopped answering.
	ctx    context.Context
	cancel context.CancelFunc
	// background runs the commands Turn.Finish sends behind a caller's
	// back; wg the core's other goroutines.
	background Background
	wg         sync.WaitGroup
}

// CoreConfig is what NewCore needs.
type CoreConfig struct {
	Options shardcast.Options     // defaults applied
	Conn    shardcast.ConnOptions // defaults applied
	// Paths is the number of subscribe paths; Partitions says they are
	// cluster partitions (events then list them in Event.Partitions).
	Paths      int
	Partitions bool
	// PartitionBank, if set, says the paths come in banks of that many
	// partitions: path p is partition p % PartitionBank in events.
	PartitionBank int
	// Mode is the subscribe command family of the engine's wires.
	Mode subconn.Mode
	// Trouble, if set, hears of each subscribe connection lost and each
	// path found silent, by node address, before the refresh they ask
	// for: an engine that may subscribe elsewhere can avoid the node.
	Trouble func(addr string)
	// ConfirmReconnects says that a link that reconnected after losing
	// its wire subscribes nothing until the engine calls Link.Confirm
	// (the cluster engine: once a slot map from another node lists the
	// node; see Link.unconfirmedAt).
	ConfirmReconnects bool
}

// NewCore returns a core; SetRouter must be called before it is used.
func NewCore(cfg CoreConfig) *Core {
	c := &Core{
		Options:           cfg.Options,
		Conn:              cfg.Conn,
		Log:               cfg.Options.Logger,
		mode:              cfg.Mode,
		onTrouble:         cfg.Trouble,
		confirmReconnects: cfg.ConfirmReconnects,
		partitions:        cfg.Partitions,
		bank:              cfg.PartitionBank,
		resub:             shardcast.Resubscriber{Batch: cfg.Options.SubscribeBatch},
		changed:           make(chan struct{}),
		refresh:           make(chan struct{}, 1),
		kick:              make(chan struct{}, 1),
		closing:           make(chan struct{}),
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.Emitter = events.NewEmitter(cfg.Options.OnEvent, c.Log)
	var partitionOf func(int) int
	if cfg.Partitions {
		partitionOf = c.partitionOf
	}
	c.ledger = newLedger(c.Emitter.Emit, partitionOf)
	c.hot = hot.NewTracker(cfg.Options, c.Emitter.Emit)
	if cfg.Options.Handler != nil {
		c.Pool = newPool(cfg.Options, &c.ledger.pool)
		c.Inbox = &Inbox{Pool: c.Pool, Raw: cfg.Options.Raw}
		c.Paths, c.states = newPaths(cfg.Paths)
		for i := range c.Paths {
			// A shardcast publisher routed to a demoted master notices
			// within a HealthInterval (its ROLE check); the second one
			// covers its slot-map poll, the bus's delay and this
			// broker's own move, which may come late.
			if cfg.Conn.HealthInterval > 0 {
				c.Paths[i].orderSpan = 2 * cfg.Conn.HealthInterval
			}
		}
	}
	return c
}

// trouble tells the engine's Trouble hook of a failing node.
func (c *Core) trouble(addr string) {
	if c.onTrouble != nil && addr != "" {
		c.onTrouble(addr)
	}
}

// SetRouter installs the engine's router.
func (c *Core) SetRouter(r Router) { c.router = r }

// Ctx ends when Close begins.
func (c *Core) Ctx() context.Context { return c.ctx }

// Closing is closed when Close begins.
func (c *Core) Closing() <-chan struct{} { return c.closing }

// Closed reports whether Close has begun.
func (c *Core) Closed() bool { return c.closed.Load() }

// Go runs f on a goroutine Close waits for, after it cancelled Ctx.
func (c *Core) Go(f func()) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		f()
	}()
}

// Published counts a publish Redis accepted.
func (c *Core) Published() { c.published.Add(1) }

// CheckPublish is Publish's argument check, run before anything is sent.
func (c *Core) CheckPublish(ctx context.Context, channel string, payload []byte) error {
	if err := CheckPublish(ctx, c.closed.Load(), channel, payload, c.Options.MaxPayload); err != nil {
		return err
	}
	if c.hot.Sampled() {
		c.recordPublish(channel)
	}
	return nil
}

// recordPublish counts a sampled publish of channel for HotChannels,
// against the node whose subscribe link carries the channel's path: the
// node the publish goes to. A publish-only broker has no links, so its
// publishes are counted against no node ("").
func (c *Core) recordPublish(channel string) {
	node := ""
	if c.Paths != nil {
		if l := c.router.Carrier(c.router.PathOf(channel)); l != nil {
			node = l.Addr
		}
	}
	c.hot.Record(shardcast.HotOut, node, channel)
}

// HotChannels returns the busiest channels the broker published and
// received over the last complete hot-channel window (see
// hot.Tracker); nil when detection is off.
func (c *Core) HotChannels() []shardcast.HotChannel { return c.hot.HotChannels() }

// DeliverFrom hands a message that arrived on link l for path p to the
// worker pool, unless it is a copy of one already taken: the path's
// subscription has moved to another link since (the old node still
// delivers what the new one delivers too), or it moved here a moment ago
// and the message was published before the old link's last one (see
// Path.setOwner). Copies are dropped and counted in Stats.Stale. So is a
// message the path's order fence holds back, published before one of its
// channel already taken since a failover (see orderFence), which is also
// reported as dropped. It runs on l's reader.
func (c *Core) DeliverFrom(l *Link, p int, channel string, payload []byte) {
	c.deliver(l, l.feeder, p, channel, payload, time.Time{})
}

// DeliverHeld is DeliverFrom for a message that arrived on link l for
// path p and was held back, handed over now from another goroutine than
// l's reader (an online re-layout delivers what it held once the old
// layout drained): it goes to the worker pool directly, not through l's
// feeder, which only l's reader may use. arrived is when it came: a drop
// of it is reported from then (pool.Pool.SubmitHeld).
func (c *Core) DeliverHeld(l *Link, p int, channel string, payload []byte, arrived time.Time) {
	c.deliver(l, nil, p, channel, payload, arrived)
}

func (c *Core) deliver(l *Link, f *pool.Feeder, p int, channel string, payload []byte, arrived time.Time) {
	path := c.Paths[p]
	l.received.Add(1)
	path.received.Add(1)
	// A delivery probe is the engine's own traffic: not the application's
	// (HotChannels), and a stale copy of one is neither counted nor
	// reported (Stats.Stale counts what EventDropped reports).
	probe := path.probe != nil && channel == path.probe.channel
	// l's sampler belongs to its reader; a held message is handed over
	// from another goroutine (f is nil then) and draws from the tracker.
	if !probe && ((f != nil && l.hot.Sampled()) || (f == nil && c.hot.Sampled())) {
		c.hot.Record(shardcast.HotIn, l.Addr, channel)
	}
	at, body, ok := c.Inbox.Decode(payload)
	if !at.IsZero() {
		l.relayed(at.UnixNano())
	}
	if path.owner.Load() != l {
		if !probe {
			c.dropStale(l, path)
			c.reportStale(l, p, channel, at)
		}
		return
	}
	if !ok {
		l.badFrames.Add(1)
		path.badFrames.Add(1)
	}
	if !at.IsZero() {
		if !path.admit(at.UnixNano()) {
			if !probe {
				c.dropStale(l, path)
				c.reportStale(l, p, channel, at)
			}
			return
		}
		path.taken(l, at.UnixNano())
	}
	if probe {
		c.probeArrived(l, path, body)
		return
	}
	if !at.IsZero() && !path.order.admit(channel, at.UnixNano()) {
		c.dropStale(l, path)
		c.reportStale(l, p, channel, at)
		return
	}
	if !c.Inbox.Submit(f, channel, body, at, arrived) {
		l.dropped.Add(1)
		path.dropped.Add(1)
	}
}

// reportStale hands a message dropped as stale (from a link its path no
// longer takes messages from, or fenced after a failover) to the late
// report, so that no drop of the engine's own is silent: most are copies
// the application also got from the path's new node, but not all (a
// message the old node delivered after the move and never relayed, one
// published before the old link's last by a publisher that sent it
// later). Probes are not reported; at is zero for a raw message.
func (c *Core) reportStale(l *Link, p int, channel string, at time.Time) {
	path := c.Paths[p]
	if path.probe != nil && channel == path.probe.channel {
		return
	}
	if at.IsZero() {
		at = time.Now()
	}
	part := -1
	if c.partitions {
		part = c.partitionOf(p)
	}
	c.ledger.stale(l.Addr, part, channel, at)
}

func (c *Core) dropStale(l *Link, p *Path) {
	l.stale.Add(1)
	p.stale.Add(1)
}

// NodeStats returns the counters of the node l reaches (see
// shardcast.NodeStats); the engine adds what its publishing connection
// counted.
func (l *Link) NodeStats() shardcast.NodeStats {
	return shardcast.NodeStats{
		Addr: l.Addr, Received: l.received.Load(), Dropped: l.dropped.Load(),
		BadFrames: l.badFrames.Load(), Stale: l.stale.Load(), Reconnects: l.reconnects.Load(),
		ResubscribeCommands: l.resubscribeCommands.Load(), Down: l.Down(),
	}
}

// Wants reports whether channel is wanted on path p.
func (c *Core) Wants(p int, channel string) bool {
	if c.Paths == nil {
		return false
	}
	path := c.Paths[p]
	path.mu.Lock()
	defer path.mu.Unlock()
	_, ok := path.wanted[channel]
	return ok
}

// PathStats returns path p's counters as partition statistics (Master
// names its carrier now).
func (c *Core) PathStats(p int) shardcast.PartitionStats {
	path := c.Paths[p]
	st := shardcast.PartitionStats{
		Partition: p, Channels: path.WantedCount(), Received: path.received.Load(),
		Dropped: path.dropped.Load(), BadFrames: path.badFrames.Load(), Stale: path.stale.Load(),
		Interrupted: path.interruptedFor(),
	}
	if l := c.router.Carrier(p); l != nil {
		st.Master = l.Addr
	}
	return st
}

// CheckChannel is the argument check of a call on one channel (Eval).
func (c *Core) CheckChannel(ctx context.Context, channel string) error {
	return CheckChannels(ctx, c.closed.Load(), []string{channel})
}

// Stats returns the broker's counters.
func (c *Core) Stats() shardcast.Stats {
	st := shardcast.Stats{Published: c.published.Load(), Reconnects: c.reconnects.Load()}
	if c.Pool != nil {
		st.Delivered, st.Dropped = c.Pool.Delivered(), c.Pool.Dropped()
		st.QueueDepth, st.QueueHighWater = c.Pool.QueueDepth(), c.Pool.QueueHighWater()
		// The paths count what was read, so the hot path counts it once.
		for _, p := range c.Paths {
			st.Channels += p.WantedCount()
			st.Received += p.received.Load()
			st.BadFrames += p.badFrames.Load()
			st.Stale += p.stale.Load()
		}
	}
	return st
}

// Latency returns the worker pool's lag and handler-time histograms; they
// are empty on a publish-only broker.
func (c *Core) Latency() shardcast.LatencyStats {
	if c.Pool == nil {
		return shardcast.LatencyStats{}
	}
	lag, handling := c.Pool.Latency()
	return shardcast.LatencyStats{Lag: shardcast.HistogramSnapshot(lag), HandlerTime: shardcast.HistogramSnapshot(handling)}
}

// newPool starts the worker pool of a broker with Options o (defaults
// applied), whose drops and panics go to losses.
func newPool(o shardcast.Options, losses pool.Losses) *pool.Pool {
	return pool.New(pool.Config{
		Workers:   o.Workers,
		QueueSize: o.QueueSize,
		Handler:   pool.HandlerOf(o.Handler),
		Losses:    losses,
		Reuse:     o.ReusePayloads,
		Inline:    o.InlineHandling,
	})
}

// Close stops the broker in one order for every engine: later calls get
// ErrClosed, work in progress is cut short, the core's goroutines end,
// then teardown closes the engine's connections (its links among them),
// and the handlers of queued messages and events run out. Only the first
// call does anything.
func (c *Core) Close(teardown func()) {
	c.closeOnce.Do(func() {
		c.closed.Store(true)
		close(c.closing)
		c.cancel()
		c.background.Close()
		c.wg.Wait()
		teardown()
		c.ledger.close()
		if c.Pool != nil {
			c.Pool.Close()
			c.ledger.closePool()
		}
		c.Emitter.Close()
	})
}

// changes returns a channel that closes at the next state change.
func (c *Core) changes() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.changed
}

// signalChange wakes every call waiting for a connection or a topology
// change.
func (c *Core) signalChange() {
	c.mu.Lock()
	close(c.changed)
	c.changed = make(chan struct{})
	c.mu.Unlock()
}

func (c *Core) waitChange(ctx context.Context, changed <-chan struct{}) error {
	select {
	case <-changed:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-c.closing:
		return shardcast.ErrClosed
	}
}

// RequestRefresh asks the maintenance loop for a pass at once: the
// engine re-reads its topology (a connection was lost, Redis said a slot
// moved) and interrupted paths are healed.
func (c *Core) RequestRefresh() {
	select {
	case c.refresh <- struct{}{}:
	default:
	}
}

// Kick asks the maintenance loop for a pass no sooner than
// RecoveryInterval after the last one: during a failover every publish to
// the lost master asks.
func (c *Core) Kick() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// pathsAttr names paths for a log line, compactly (compact.Ints): as
// "partitions" on a cluster, "paths" otherwise.
func (c *Core) pathsAttr(paths []int) slog.Attr {
	if !c.partitions {
		return slog.String("paths", compact.Ints(paths))
	}
	parts := make([]int, len(paths))
	for i, p := range paths {
		parts[i] = c.partitionOf(p)
	}
	return slog.String("partitions", compact.Ints(parts))
}

// partitionOf returns the partition path p stands for in events.
func (c *Core) partitionOf(p int) int {
	if c.bank > 0 {
		return p % c.bank
	}
	return p
}
