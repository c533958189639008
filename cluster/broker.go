package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/engine"
	"github.com/shardcast/shardcast/internal/pubconn"
	"github.com/shardcast/shardcast/internal/subconn"
)

// Broker is the node-grouped sharded Pub/Sub engine for Redis Cluster. It
// implements shardcast.Broker and is safe for concurrent use.
type Broker struct {
	cfg    Config
	log    *slog.Logger
	layout *shardcast.Layout
	client rueidis.Client // topology, and publishes that need a redirect
	// route maps each partition to the publishing connection of its
	// master, rebuilt whenever the assignment changes; keyPrefix holds
	// each partition's "{tag}." and layout prefix.
	route     atomic.Pointer[[]*pubconn.Pub]
	keyPrefix []string

	pool    *shardcast.WorkerPool
	emitter *shardcast.Emitter
	inbox   *engine.Inbox
	resub   shardcast.Resubscriber
	parts   []*partState

	mu       sync.Mutex
	slots    shardcast.SlotMap
	assign   shardcast.Assignment
	masters  map[string][]*masterConn // by address; ConnsPerMaster each
	pubs     map[string]*pubconn.Pub  // publishing connections, by master address
	changed  chan struct{}            // closed and replaced whenever state changes
	stopping bool

	refresh chan struct{} // asks the topology loop for an immediate poll
	reroute chan struct{} // asks for a poll, spaced by RecoveryInterval (see kickRoute)

	calls               atomic.Uint64 // Subscribe call tokens
	published           atomic.Uint64
	resubscribeCommands atomic.Uint64
	topologyChanges     atomic.Uint64
	reconnects          atomic.Uint64

	closeOnce sync.Once
	closing   chan struct{}
	// background runs the commands finish sends behind a caller's back.
	background engine.Background
	// ctx ends when Close starts; every master connection's work derives
	// from it.
	ctx    context.Context
	cancel context.CancelFunc
	closed atomic.Bool
	wg     sync.WaitGroup
}

var _ shardcast.Broker = (*Broker)(nil)

// New connects to the cluster, reads its slot map and returns a broker. A
// broker with a Handler opens one subscribe connection per master in the
// background; Subscribe waits for them.
func New(cfg Config) (*Broker, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	layout, err := shardcast.NewLayout(cfg.Partitions, cfg.Prefix)
	if err != nil {
		return nil, err
	}
	client, err := rueidis.NewClient(cfg.clientOption())
	if err != nil {
		return nil, fmt.Errorf("shardcast: connect to cluster %v: %w", cfg.Addrs, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	b := &Broker{
		cfg:     cfg,
		log:     cfg.Logger,
		layout:  layout,
		client:  client,
		pubs:    make(map[string]*pubconn.Pub),
		resub:   shardcast.Resubscriber{Batch: cfg.SubscribeBatch},
		masters: make(map[string][]*masterConn),
		changed: make(chan struct{}),
		refresh: make(chan struct{}, 1),
		reroute: make(chan struct{}, 1),
		closing: make(chan struct{}),
		ctx:     ctx,
		cancel:  cancel,
	}
	b.emitter = shardcast.NewEmitter(cfg.OnEvent, b.log)
	b.keyPrefix = make([]string, layout.Partitions())
	for p := range b.keyPrefix {
		b.keyPrefix[p] = layout.PartitionKey(p, "")
	}
	pollCtx, pollCancel := context.WithTimeout(ctx, cfg.DialTimeout)
	slots, err := b.pollSlots(pollCtx)
	pollCancel()
	if err != nil {
		cancel()
		b.emitter.Close()
		client.Close()
		return nil, fmt.Errorf("shardcast: read cluster slot map: %w", err)
	}
	if cfg.Handler != nil {
		b.pool = shardcast.NewWorkerPool(cfg.Workers, cfg.QueueSize, cfg.Handler, b.emitter.Emit)
		b.inbox = &engine.Inbox{Pool: b.pool, Raw: cfg.Raw}
		b.parts = make([]*partState, layout.Partitions())
		for i := range b.parts {
			b.parts[i] = newPartState(i)
		}
	}
	b.applySlots(context.Background(), slots)
	b.wg.Add(1)
	if cfg.Handler != nil {
		go b.watchTopology()
	} else {
		go b.watchPublishRoute()
	}
	return b, nil
}

// Layout returns the partition layout the broker uses.
func (b *Broker) Layout() *shardcast.Layout { return b.layout }

// Fingerprint identifies the partition count, tag table and prefix. Nodes
// of one application must report the same value.
func (b *Broker) Fingerprint() string { return b.layout.Fingerprint() }

// Publish sends payload with SPUBLISH to the master owning channel's
// partition, on that master's pipelined publishing connection. A publish
// that connection could not send (its master is unreachable) or that the
// master redirected (MOVED, ASK: the slot moved) goes through rueidis,
// which follows redirections, and makes the broker refresh its slot map.
func (b *Broker) Publish(ctx context.Context, channel string, payload []byte) error {
	if err := engine.CheckPublish(ctx, b.closed.Load(), channel, payload, b.cfg.MaxPayload); err != nil {
		return err
	}
	p := b.layout.Partition(channel)
	now := time.Now()
	route := b.route.Load()
	if route == nil || (*route)[p] == nil {
		// The slot map the broker holds names no master for p's slot: ask
		// for a fresh one, and let rueidis find the owner meanwhile.
		b.kickRoute()
	} else {
		err := (*route)[p].SPublish(ctx, b.keyPrefix[p], channel, payload, b.cfg.Raw, now)
		if err == nil {
			b.published.Add(1)
			return nil
		}
		// Any failure may mean a stale route: a master that froze (the
		// publish timed out), died or gave its slot away.
		b.kickRoute()
		// Resend only what certainly did not run: a command that never
		// left, or one the master refused with a redirection.
		if b.closed.Load() {
			return shardcast.ErrClosed // Close cut the call short
		}
		if ctx.Err() != nil || !(errors.Is(err, pubconn.ErrNotSent) || isMoved(err)) {
			return fmt.Errorf("shardcast: publish: %w", err)
		}
	}
	return b.publishRedirected(ctx, channel, payload, now)
}

// publishRedirected publishes through the rueidis cluster client.
func (b *Broker) publishRedirected(ctx context.Context, channel string, payload []byte, now time.Time) error {
	frame := engine.NewKeyedFrame(b.layout, channel, payload, b.cfg.Raw, now)
	cmd := b.client.B().Spublish().Channel(frame.Key()).Message(frame.String()).Build()
	for attempt := 0; ; attempt++ {
		err := b.client.Do(ctx, cmd).Error()
		if err == nil {
			break
		}
		if attempt < publishDialRetries && isDialError(err) && ctx.Err() == nil {
			// The command never left: the client's slot map still names a
			// master that is gone (a failover or a removed node), and the
			// failed dial made rueidis refresh its map. Resending cannot
			// publish twice.
			if b.sleep(ctx, engine.Backoff(attempt, b.cfg.ReconnectMin, b.cfg.ReconnectMax)) == nil {
				continue
			}
		}
		// The frame is not returned to the pool: after any failure (a
		// dead pipe, an abandoned context) rueidis's writer may still hold
		// it, and a reused buffer would be overwritten under it.
		if b.closed.Load() {
			return shardcast.ErrClosed
		}
		return fmt.Errorf("shardcast: publish: %w", err)
	}
	frame.Release()
	b.published.Add(1)
	return nil
}

// publishDialRetries bounds how often Publish resends after a failed dial.
const publishDialRetries = 5

// isDialError reports whether err is a failure to connect, after which the
// command was certainly not sent.
func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// sleep waits for d, bounded by ctx and by Close.
func (b *Broker) sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-b.closing:
		return shardcast.ErrClosed
	}
}

// Subscribe subscribes channels and returns once Redis confirmed every one.
// While a partition's master is unreachable (a failover, a slot move) it
// waits for the topology to settle, bounded by ctx. On error no channel of
// this call is left newly subscribed, unless a later Subscribe asked for it
// meanwhile; an undo that cannot finish within ctx finishes in the
// background, ahead of any later call for its partition.
func (b *Broker) Subscribe(ctx context.Context, channels ...string) error {
	if err := b.check(ctx, channels); err != nil {
		return err
	}
	if b.pool == nil {
		return shardcast.ErrNoHandler
	}
	token := b.calls.Add(1)
	groups := shardcast.GroupByPartition(channels, b.layout.Partition)
	added := make([][]string, len(groups))
	errs := make([]error, len(groups))
	var wg sync.WaitGroup
	for i, g := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			added[i], errs[i] = b.subscribePartition(ctx, b.parts[g.Key], g.Channels, token)
		}()
	}
	wg.Wait()
	err := errors.Join(errs...)
	if err == nil {
		return nil
	}
	for i, g := range groups {
		if errs[i] == nil && len(added[i]) > 0 {
			_ = b.unsubscribePartition(ctx, b.parts[g.Key], added[i], token)
		}
	}
	return fmt.Errorf("shardcast: subscribe: %w", err)
}

// Unsubscribe unsubscribes channels. Unknown channels are ignored.
func (b *Broker) Unsubscribe(ctx context.Context, channels ...string) error {
	if err := b.check(ctx, channels); err != nil {
		return err
	}
	if b.pool == nil {
		return nil
	}
	groups := shardcast.GroupByPartition(channels, b.layout.Partition)
	errs := make([]error, len(groups))
	var wg sync.WaitGroup
	for i, g := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = b.unsubscribePartition(ctx, b.parts[g.Key], g.Channels, 0)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("shardcast: unsubscribe: %w", err)
	}
	return nil
}

func (b *Broker) check(ctx context.Context, channels []string) error {
	return engine.CheckChannels(ctx, b.closed.Load(), channels)
}

// onMessage runs on a wire's reader goroutine.
func (b *Broker) onMessage(key string, payload []byte) {
	channel, ok := b.layout.Channel(key)
	if !ok {
		b.log.Debug("shardcast: message on a key outside the layout", "key", strings.Clone(key)) // key is a view
		return
	}
	b.inbox.Deliver(channel, payload)
}

// onLost runs on a wire's reader goroutine when the server unsubscribed a
// channel on its own: the channel's slot moved away from m.
func (b *Broker) onLost(m *masterConn, key string) {
	channel, ok := b.layout.Channel(key)
	if !ok {
		return
	}
	p := b.parts[b.layout.Partition(channel)]
	// The slot moved at some point after the wire last proved healthy.
	since := time.Now()
	if h := m.lastHealthy(); h.UnixNano() > 0 && h.Before(since) {
		since = h
	}
	if chans, ok := p.noteLost(m.current(), since); ok {
		b.emitter.Emit(shardcast.Event{
			Kind: shardcast.EventInterrupted, Shard: m.addr, Partitions: []int{p.id},
			Channels: chans, Since: since, Err: shardcast.ErrSlotMoved,
		})
	}
	b.requestRefresh()
}

// interrupt marks p as interrupted after a failed command on wire.
func (b *Broker) interrupt(p *partState, wire *subconn.Conn, cause error) {
	now := time.Now()
	if chans, ok := p.interrupt(wire, now); ok {
		b.emitter.Emit(shardcast.Event{
			Kind: shardcast.EventInterrupted, Shard: b.masterAddr(p.id), Partitions: []int{p.id},
			Channels: chans, Since: now, Err: cause,
		})
	}
}

func (b *Broker) masterAddr(part int) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if part < len(b.assign) {
		return b.assign[part]
	}
	return ""
}

// connFor returns the subscribe connection that carries partition part,
// or nil while its slot has no master.
func (b *Broker) connFor(part int) *masterConn {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.connForLocked(part)
}

func (b *Broker) connForLocked(part int) *masterConn {
	if part >= len(b.assign) {
		return nil
	}
	conns := b.masters[b.assign[part]]
	if len(conns) == 0 {
		return nil
	}
	return conns[part%len(conns)]
}

// partitionsOfConn returns the partitions m carries.
func (b *Broker) partitionsOfConn(m *masterConn) []int {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []int
	for _, p := range b.assign.PartitionsOf(m.addr) {
		if b.connForLocked(p) == m {
			out = append(out, p)
		}
	}
	return out
}

// allConns lists every master connection.
func (b *Broker) allConns() []*masterConn {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []*masterConn
	for _, conns := range b.masters {
		out = append(out, conns...)
	}
	return out
}

func (b *Broker) partitionsOf(addr string) []int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.assign.PartitionsOf(addr)
}

// changes returns a channel that closes at the next state change.
func (b *Broker) changes() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.changed
}

func (b *Broker) signalChange() {
	b.mu.Lock()
	close(b.changed)
	b.changed = make(chan struct{})
	b.mu.Unlock()
}

func (b *Broker) waitChange(ctx context.Context, changed <-chan struct{}) error {
	select {
	case <-changed:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-b.closing:
		return shardcast.ErrClosed
	}
}

func (b *Broker) requestRefresh() {
	select {
	case b.refresh <- struct{}{}:
	default:
	}
}

// kickRoute asks for a slot-map poll after a publish met a stale route.
// The topology loops honour it no sooner than RecoveryInterval after their
// last poll: during a failover every publish to the lost master asks.
func (b *Broker) kickRoute() {
	select {
	case b.reroute <- struct{}{}:
	default:
	}
}

// Stats returns the broker's counters.
func (b *Broker) Stats() shardcast.Stats {
	st := shardcast.Stats{Published: b.published.Load(), Reconnects: b.reconnects.Load()}
	if b.pool != nil {
		st.Delivered, st.Dropped = b.pool.Delivered(), b.pool.Dropped()
		st.Received, st.BadFrames = b.inbox.Received(), b.inbox.BadFrames()
		for _, p := range b.parts {
			st.Channels += p.wantedCount()
		}
	}
	return st
}

// Masters returns the masters the broker currently holds a subscribe
// connection to (or is connecting to), and the partitions each owns.
func (b *Broker) Masters() map[string][]int {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make(map[string][]int, len(b.masters))
	for addr := range b.masters {
		out[addr] = b.assign.PartitionsOf(addr)
	}
	return out
}

// Close closes every connection, waits for the broker's goroutines and the
// handlers of queued messages, and makes later calls return ErrClosed. It
// is idempotent. Do not call it from a Handler or OnEvent: it waits for
// them to return.
func (b *Broker) Close() error {
	b.closeOnce.Do(func() {
		b.closed.Store(true)
		close(b.closing)
		b.cancel()
		b.background.Close()
		b.wg.Wait()
		b.mu.Lock()
		b.stopping = true
		masters := b.masters
		b.masters = map[string][]*masterConn{}
		pubs := b.pubs
		b.pubs = map[string]*pubconn.Pub{}
		b.route.Store(nil)
		b.mu.Unlock()
		for _, p := range pubs {
			p.Close()
		}
		for _, conns := range masters {
			for _, m := range conns {
				m.close()
			}
		}
		b.client.Close()
		if b.pool != nil {
			b.pool.Close()
		}
		b.emitter.Close()
	})
	return nil
}
