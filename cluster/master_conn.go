package cluster

import (
	"context"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/engine"
	"github.com/shardcast/shardcast/internal/subconn"
)

// masterConn owns the one subscribe connection this broker holds to one
// master, however many partitions that master owns. Its goroutine
// reconnects after a loss, resubscribes the master's partitions, pings the
// wire to catch a frozen server, and stops when the master leaves the
// topology.
type masterConn struct {
	b    *Broker
	addr string
	idx  int // carries the master's partitions p with p % ConnsPerMaster == idx

	mu   sync.Mutex
	wire *subconn.Conn // nil while down

	// slow is set while a health ping has been unanswered for a whole
	// HealthInterval. The topology loop then polls at RecoveryInterval: a
	// frozen master is usually replaced by its replica (after the cluster
	// node timeout) before the ping times out, and the slot map shows it.
	slow atomic.Bool
	// syncing is set while the topology loop's heal runs a sync of this
	// connection, so that heals never pile up behind a slow master.
	syncing atomic.Bool
	// healthyAt is when the wire last proved alive, in Unix nanoseconds:
	// when it connected, or when a ping that was answered was sent (the
	// server ran the PING after that, and any slot it lost before would
	// have pushed its sunsubscribe ahead of the PONG). A frozen master, or
	// a slot moved away, loses messages from then on, not from when the
	// broker noticed.
	healthyAt atomic.Int64

	// ctx ends when the master is stopped or the broker closes; it bounds
	// every dial, ping and resubscribe so that stopping never waits for a
	// frozen server.
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
}

func newMasterConn(b *Broker, addr string, idx int) *masterConn {
	ctx, cancel := context.WithCancel(b.ctx)
	return &masterConn{b: b, addr: addr, idx: idx, ctx: ctx, cancel: cancel, done: make(chan struct{})}
}

// current returns the live wire, or nil.
func (m *masterConn) current() *subconn.Conn {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.wire != nil && !m.wire.Alive() {
		return nil
	}
	return m.wire
}

// close stops the goroutine and closes the wire; it waits for both.
func (m *masterConn) close() {
	m.cancel()
	<-m.done
}

func (m *masterConn) run() {
	defer close(m.done)
	connected := false
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			select {
			case <-time.After(engine.Backoff(attempt-1, m.b.cfg.ReconnectMin, m.b.cfg.ReconnectMax)):
			case <-m.ctx.Done():
				return
			}
		}
		wire, err := m.open()
		if err != nil {
			m.b.log.Debug("shardcast: master connect failed", "master", m.addr, "attempt", attempt, "err", err)
			if attempt > 0 && attempt%10 == 0 {
				m.b.emitter.Emit(shardcast.Event{Kind: shardcast.EventError, Shard: m.addr, Since: time.Now(), Err: err})
			}
			continue
		}
		connectedAt := time.Now()
		if connected {
			m.b.reconnects.Add(1)
		}
		connected = true
		m.healthyAt.Store(time.Now().UnixNano())
		m.mu.Lock()
		m.wire = wire
		m.mu.Unlock()
		m.b.signalChange()
		m.b.sync(m, wire, m.b.partitionsOfConn(m))
		if !m.watch(wire) {
			return
		}
		if time.Since(connectedAt) >= m.b.cfg.ReconnectMax {
			attempt = -1 // it was healthy a while: reconnect at once
		}
	}
}

// open dials the master with the publishing client's credentials and TLS.
func (m *masterConn) open() (*subconn.Conn, error) {
	ctx, cancel := context.WithTimeout(m.ctx, m.b.cfg.DialTimeout)
	defer cancel()
	return subconn.Open(ctx, subconn.FromOption(m.addr, m.b.cfg.clientOption()), subconn.Sharded, subconn.Hooks{
		OnMessage: m.b.onMessage,
		OnLost:    func(key string) { m.b.onLost(m, key) },
	})
}

// watch pings the wire until it dies (it then reports the loss and returns
// true) or the master is stopped (false). A ping runs on its own goroutine
// so that a ping still unanswered after a whole HealthInterval can raise
// suspicion (see slow) long before HealthTimeout declares the wire dead.
func (m *masterConn) watch(wire *subconn.Conn) bool {
	tick := time.NewTicker(m.b.cfg.HealthInterval)
	defer tick.Stop()
	pinged := make(chan error, 1)
	var pingCancel context.CancelFunc // non-nil while a ping is out
	var pingSent time.Time
	endPing := func() {
		if pingCancel != nil {
			pingCancel()
			<-pinged
			pingCancel = nil
		}
		m.slow.Store(false)
	}
	for {
		select {
		case <-m.ctx.Done():
			endPing()
			m.mu.Lock()
			m.wire = nil
			m.mu.Unlock()
			wire.Close()
			return false
		case <-wire.Done():
			since := time.Now()
			if m.slow.Load() {
				since = m.lastHealthy()
			}
			endPing()
			m.lost(wire, since)
			return true
		case err := <-pinged:
			pingCancel()
			pingCancel = nil
			if err == nil {
				m.slow.Store(false)
				m.healthyAt.Store(pingSent.UnixNano())
			} else if wire.Alive() && m.ctx.Err() == nil {
				m.slow.Store(true) // the loss below dates from the last answer
				m.b.log.Warn("shardcast: master did not answer ping; dropping its connection", "master", m.addr, "err", err)
				wire.Close()
			}
		case <-tick.C:
			if pingCancel != nil {
				if !m.slow.Swap(true) {
					m.b.log.Warn("shardcast: master is slow to answer ping; polling the topology", "master", m.addr)
					m.b.requestRefresh()
				}
				continue
			}
			pingSent = time.Now()
			pingCancel = m.ping(wire, pinged)
		}
	}
}

// ping starts one health ping of wire; its result goes to out. The
// returned function cancels it.
func (m *masterConn) ping(wire *subconn.Conn, out chan<- error) context.CancelFunc {
	ctx, cancel := context.WithTimeout(m.ctx, m.b.cfg.HealthTimeout)
	go func() { out <- wire.Ping(ctx) }()
	return cancel
}

// lastHealthy returns when the wire last proved alive.
func (m *masterConn) lastHealthy() time.Time { return time.Unix(0, m.healthyAt.Load()) }

// lost marks every partition carried by wire as interrupted, reports them
// and asks for a topology refresh: the master may have failed over.
func (m *masterConn) lost(wire *subconn.Conn, now time.Time) {
	m.mu.Lock()
	m.wire = nil
	m.mu.Unlock()
	err := wire.Err()
	wire.Close()
	var parts []int
	var channels []string
	for _, p := range m.b.parts {
		if chans, ok := p.interrupt(wire, now); ok {
			parts = append(parts, p.id)
			channels = append(channels, chans...)
		}
	}
	m.b.log.Warn("shardcast: master connection lost", "master", m.addr, "partitions", len(parts), "err", err)
	if len(parts) > 0 {
		m.b.emitter.Emit(shardcast.Event{
			Kind: shardcast.EventInterrupted, Shard: m.addr, Partitions: parts,
			Channels: channels, Since: now, Err: err,
		})
	}
	m.b.requestRefresh()
	m.b.signalChange()
}

// sync subscribes, on wire, every listed partition that m owns and that is
// not already active there, one partition per command group, spread over
// the resubscriber's workers. Partitions that fail stay interrupted and are
// retried by the topology loop.
func (b *Broker) sync(m *masterConn, wire *subconn.Conn, ids []int) {
	if len(ids) == 0 {
		return
	}
	sort.Ints(ids)
	var locked []*partState
	defer func() {
		for _, p := range locked {
			p.unlock()
		}
	}()
	// Stopping the master (it left the topology) or closing the broker
	// ends a sync at once, even one stuck on a frozen server.
	ctx, cancel := context.WithTimeout(m.ctx, b.cfg.CommandTimeout)
	defer cancel()
	for _, id := range ids {
		p := b.parts[id]
		if err := p.lock(ctx, b.closing); err != nil {
			return
		}
		locked = append(locked, p)
	}
	var groups []shardcast.Group
	var empty []*partState
	seqs := make(map[int]uint64)
	for _, p := range locked {
		if b.connFor(p.id) != m {
			continue
		}
		p.mu.Lock()
		active := p.wire == wire
		p.mu.Unlock()
		if active {
			continue
		}
		wanted := p.snapshot()
		if len(wanted) == 0 {
			empty = append(empty, p)
			continue
		}
		keys := make([]string, len(wanted))
		for i, ch := range wanted {
			keys[i] = b.layout.PartitionKey(p.id, ch)
		}
		groups = append(groups, shardcast.Group{Key: p.id, Channels: keys})
		seqs[p.id] = p.lostSeq()
	}
	for _, p := range empty {
		p.activate(wire)
	}
	if len(groups) == 0 {
		return
	}
	report := b.resub.Run(ctx, groups, func(ctx context.Context, cmd shardcast.Command) error {
		return engine.FirstError(wire.Subscribe(ctx, cmd.Channels))
	})
	b.resubscribeCommands.Add(uint64(report.Commands))
	failed := make(map[int]bool, len(report.FailedKeys))
	for _, k := range report.FailedKeys {
		failed[k] = true
	}
	var restored []*partState
	var since time.Time
	for _, g := range groups {
		if failed[g.Key] {
			continue
		}
		p := b.parts[g.Key]
		s, ok := p.activateIf(wire, seqs[g.Key])
		if !ok {
			// A slot move overtook the confirmation; the next heal retries
			// on whichever master owns the slot by then.
			b.requestRefresh()
			continue
		}
		if !s.IsZero() {
			restored = append(restored, p)
			if since.IsZero() || s.Before(since) {
				since = s
			}
		}
	}
	if report.Err != nil {
		b.log.Warn("shardcast: resubscribe incomplete", "master", m.addr, "failed_partitions", report.FailedKeys, "err", report.Err)
		if isMoved(report.Err) {
			b.requestRefresh()
		}
	}
	if len(restored) > 0 {
		b.emitRestored(m.addr, restored, since)
	}
	b.signalChange()
}

func (b *Broker) emitRestored(addr string, parts []*partState, since time.Time) {
	ev := shardcast.Event{Kind: shardcast.EventRestored, Shard: addr, Since: since, Until: time.Now()}
	for _, p := range parts {
		ev.Partitions = append(ev.Partitions, p.id)
		ev.Channels = append(ev.Channels, p.snapshot()...)
	}
	b.emitter.Emit(ev)
}
