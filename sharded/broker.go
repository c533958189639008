package sharded

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/engine"
	"github.com/shardcast/shardcast/internal/jump"
	"github.com/shardcast/shardcast/internal/pubconn"
	"github.com/shardcast/shardcast/internal/subconn"
)

// Broker spreads channels over isolated Redis instances with a jump
// consistent hash and uses classic PUBLISH/SUBSCRIBE on each. It implements
// shardcast.Broker and is safe for concurrent use.
type Broker struct {
	cfg    Config
	log    *slog.Logger
	shards []*shard
	fp     string

	pool    *shardcast.WorkerPool
	emitter *shardcast.Emitter
	inbox   *engine.Inbox
	resub   shardcast.Resubscriber

	calls      atomic.Uint64 // Subscribe call tokens
	published  atomic.Uint64
	reconnects atomic.Uint64

	closeOnce sync.Once
	closing   chan struct{}
	closed    atomic.Bool
	wg        sync.WaitGroup // subscriber run loops
	// ctx ends when Close begins. It bounds the commands the broker sends
	// on its own, so that Close does not wait out their timeouts against an
	// instance that stopped answering.
	ctx    context.Context
	cancel context.CancelFunc

	// background runs commands finished after their caller returned (see
	// subscriber.finish).
	background engine.Background
}

// shard is one Redis instance: its publishing connection and this
// broker's subscribe connections to it.
type shard struct {
	addr string
	dial subconn.Dialer // subscribe connections
	pub  *pubconn.Pub
	subs []*subscriber
}

var _ shardcast.Broker = (*Broker)(nil)

// New connects to every address in cfg.Addrs and returns a broker. It fails
// if an address is malformed or an instance cannot be reached within
// DialTimeout. Subscribe connections are opened in the background; a
// Subscribe call waits for them.
func New(cfg Config) (*Broker, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	b := &Broker{
		cfg:     cfg,
		log:     cfg.Logger,
		closing: make(chan struct{}),
		resub:   shardcast.Resubscriber{Batch: cfg.SubscribeBatch},
	}
	b.ctx, b.cancel = context.WithCancel(context.Background())
	addrs := make([]string, len(cfg.Addrs))
	dials := make([]subconn.Dialer, len(cfg.Addrs))
	for i, a := range cfg.Addrs {
		d, err := cfg.dialer(a)
		if err != nil {
			return nil, err
		}
		dials[i], addrs[i] = d, d.Addr
	}
	b.fp = fingerprint(addrs)
	for i, d := range dials {
		sh := &shard{addr: d.Addr, dial: d, pub: pubconn.New(d, cfg.HealthTimeout, cfg.ReconnectMin)}
		b.shards = append(b.shards, sh)
		// Connect now, so that a wrong address or password fails New
		// rather than every later call.
		ctx, cancel := context.WithTimeout(b.ctx, cfg.DialTimeout)
		err := sh.pub.Ping(ctx)
		cancel()
		if err != nil {
			b.cancel()
			b.closeClients()
			return nil, fmt.Errorf("shardcast: connect shard %d (%s): %w", i, d.Addr, err)
		}
	}
	b.emitter = shardcast.NewEmitter(cfg.OnEvent, b.log)
	if cfg.Handler != nil {
		b.pool = shardcast.NewWorkerPool(cfg.Workers, cfg.QueueSize, cfg.Handler, b.emitter.Emit)
		b.inbox = &engine.Inbox{Pool: b.pool, Raw: cfg.Raw}
		for i, sh := range b.shards {
			for range cfg.ConnsPerShard {
				s := newSubscriber(b, i, sh.addr, sh.dial)
				sh.subs = append(sh.subs, s)
				b.wg.Add(1)
				go s.run()
			}
		}
	}
	return b, nil
}

// fingerprint identifies the shard list: two brokers place every channel
// on the same instance exactly when their fingerprints are equal.
func fingerprint(addrs []string) string {
	sum := sha256.Sum256([]byte("sharded/v1\n" + strings.Join(addrs, "\n")))
	return "sharded-" + hex.EncodeToString(sum[:6])
}

// Fingerprint identifies the shard list and its order. Nodes of one
// application must report the same value, or they will miss each other's
// messages.
func (b *Broker) Fingerprint() string { return b.fp }

// Shard returns the index in Config.Addrs of the instance that carries
// channel.
func (b *Broker) Shard(channel string) int { return jump.Channel(channel, len(b.shards)) }

// Publish sends payload to channel's shard with PUBLISH and returns once
// Redis accepted it. Concurrent calls share writes: while one write is in
// flight, the commands of other callers gather for the next, so there is
// no flush delay for a lone publisher and few syscalls under load.
func (b *Broker) Publish(ctx context.Context, channel string, payload []byte) error {
	if err := engine.CheckPublish(ctx, b.closed.Load(), channel, payload, b.cfg.MaxPayload); err != nil {
		return err
	}
	sh := b.shards[b.Shard(channel)]
	if err := sh.pub.Publish(ctx, channel, payload, b.cfg.Raw, time.Now()); err != nil {
		if b.closed.Load() {
			return shardcast.ErrClosed // Close cut the call short
		}
		return fmt.Errorf("shardcast: publish to shard %s: %w", sh.addr, err)
	}
	b.published.Add(1)
	return nil
}

// Subscribe subscribes channels and returns once Redis confirmed every one.
// While a shard is unreachable it waits, bounded by ctx. On error no
// channel of this call is left newly subscribed, unless a later Subscribe
// asked for it meanwhile: if ctx ends with commands in flight on one shard,
// that shard's undo finishes in the background, ahead of any later call
// for these channels; channels this call added on other shards are
// unsubscribed before it returns.
func (b *Broker) Subscribe(ctx context.Context, channels ...string) error {
	if err := b.check(ctx, channels); err != nil {
		return err
	}
	if b.pool == nil {
		return shardcast.ErrNoHandler
	}
	type result struct {
		s     *subscriber
		added []string
		err   error
	}
	token := b.calls.Add(1)
	groups := b.route(channels)
	results := make([]result, 0, len(groups))
	for s := range groups {
		results = append(results, result{s: s})
	}
	var wg sync.WaitGroup
	for i := range results {
		wg.Add(1)
		go func(r *result) {
			defer wg.Done()
			r.added, r.err = r.s.subscribe(ctx, groups[r.s], token)
		}(&results[i])
	}
	wg.Wait()
	var errs []error
	for _, r := range results {
		errs = append(errs, r.err)
	}
	err := errors.Join(errs...)
	if err == nil {
		return nil
	}
	// Undo the connections that succeeded so the call has no partial
	// effect. Channels that were subscribed before the call stay.
	for _, r := range results {
		if r.err == nil && len(r.added) > 0 {
			_ = r.s.unsubscribe(context.WithoutCancel(ctx), r.added, token)
		}
	}
	return fmt.Errorf("shardcast: subscribe: %w", err)
}

// Unsubscribe unsubscribes channels. Unknown channels are ignored. The
// channels leave the broker's subscriptions at once; if ctx ends before
// Redis confirmed the UNSUBSCRIBE, the call returns nil and the command
// completes in the background, still ahead of any later call for these
// channels.
func (b *Broker) Unsubscribe(ctx context.Context, channels ...string) error {
	if err := b.check(ctx, channels); err != nil {
		return err
	}
	if b.pool == nil {
		return nil
	}
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	for s, chans := range b.route(channels) {
		wg.Add(1)
		go func(s *subscriber, chans []string) {
			defer wg.Done()
			if err := s.unsubscribe(ctx, chans, 0); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}(s, chans)
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

// route groups channels by the subscribe connection that carries them.
func (b *Broker) route(channels []string) map[*subscriber][]string {
	out := make(map[*subscriber][]string)
	for _, ch := range channels {
		sh := b.shards[b.Shard(ch)]
		s := sh.subs[0]
		if n := len(sh.subs); n > 1 {
			s = sh.subs[xxhash.Sum64String(ch)%uint64(n)]
		}
		out[s] = append(out[s], ch)
	}
	return out
}

func (b *Broker) batches(channels []string) [][]string {
	cmds := shardcast.PlanCommands(shardcast.Group{Channels: channels}, b.cfg.SubscribeBatch)
	out := make([][]string, len(cmds))
	for i, c := range cmds {
		out[i] = c.Channels
	}
	return out
}

// Stats returns the broker's counters.
func (b *Broker) Stats() shardcast.Stats {
	st := shardcast.Stats{Published: b.published.Load(), Reconnects: b.reconnects.Load()}
	if b.pool != nil {
		st.Delivered, st.Dropped = b.pool.Delivered(), b.pool.Dropped()
		st.Received, st.BadFrames = b.inbox.Received(), b.inbox.BadFrames()
	}
	for _, sh := range b.shards {
		for _, s := range sh.subs {
			st.Channels += s.wantedCount()
		}
	}
	return st
}

// Close closes every connection, waits for the broker's goroutines and
// the handlers of messages already queued, and makes later calls return
// ErrClosed. It is idempotent. Do not call it from a Handler or OnEvent:
// it waits for them to return.
func (b *Broker) Close() error {
	b.closeOnce.Do(func() {
		b.closed.Store(true)
		close(b.closing)
		b.cancel()
		b.wg.Wait()
		b.background.Close()
		b.closeClients()
		if b.pool != nil {
			b.pool.Close()
		}
		if b.emitter != nil {
			b.emitter.Close()
		}
	})
	return nil
}

func (b *Broker) closeClients() {
	for _, sh := range b.shards {
		sh.pub.Close()
	}
}
