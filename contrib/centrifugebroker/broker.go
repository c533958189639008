package centrifugebroker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/centrifugal/centrifuge"
	"github.com/shardcast/shardcast"
)

// ErrNotSupported is wrapped by the error of a call that asks for what the
// broker cannot provide: history, idempotency and version skipping need an
// engine that runs scripts (both shardcast engines do). It wraps
// centrifuge.ErrorNotAvailable, so a client whose call hits it is told
// "not available" (code 108).
var ErrNotSupported = fmt.Errorf("centrifugebroker: not supported: %w", centrifuge.ErrorNotAvailable)

// ErrReservedChannel is returned by calls on the control channel
// (Config.ControlChannel) made through the centrifuge.Broker methods. It
// wraps centrifuge.ErrorPermissionDenied, so that Centrifuge refuses a
// client's subscription to that name with it; any other error would make
// Centrifuge disconnect the client, which would reconnect and ask again
// for ever, its other subscriptions dropped each time.
var ErrReservedChannel = fmt.Errorf("centrifugebroker: channel reserved for control messages: %w", centrifuge.ErrorPermissionDenied)

// Broker is a centrifuge.Broker, centrifuge.Controller and
// centrifuge.Closer that carries a Centrifuge node's Pub/Sub through a
// shardcast broker. It is safe for concurrent use.
type Broker struct {
	node        *centrifuge.Node
	engine      shardcast.Broker
	async       shardcast.AsyncPublisher // engine's, if it has one
	callTimeout time.Duration
	control     string
	log         *slog.Logger

	events   atomic.Pointer[centrifuge.BrokerEventHandler]
	controls atomic.Pointer[centrifuge.ControlEventHandler]

	// deadlines bound publishes; the other calls get a context each.
	deadlines *sharedDeadlines
	resync    *resync
	// controlQueue runs control commands off the engine's workers.
	controlQueue *controls
	badFrames    badFrames
	// keys names the Redis keys kept beside each channel.
	keys    *keyspace
	history *history
	// maps is the Broker's MapBroker, if it has one: its channel prefix
	// names the map channels, which the Broker's own calls refuse.
	maps atomic.Pointer[MapBroker]

	closeOnce sync.Once
	closeErr  error
}

var (
	_ centrifuge.Broker     = (*Broker)(nil)
	_ centrifuge.Controller = (*Broker)(nil)
	_ centrifuge.Closer     = (*Broker)(nil)
)

// New builds the shardcast broker cfg describes and returns a Broker for
// node; pass it to node.SetBroker before node.Run (SetBroker also makes
// it the node's Controller unless one was set). It fails, with an error
// wrapping shardcast.ErrInvalidConfig, unless exactly one of cfg.Cluster
// and cfg.Sharded is set, or if their Options.Handler or OnEvent is set;
// and it fails if the engine cannot reach Redis.
func New(node *centrifuge.Node, cfg Config) (*Broker, error) {
	if node == nil {
		return nil, fmt.Errorf("%w: centrifugebroker: nil node", shardcast.ErrInvalidConfig)
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	b := &Broker{
		node:        node,
		callTimeout: cfg.CallTimeout,
		control:     cfg.ControlChannel,
		log:         cfg.Logger,
		deadlines:   newSharedDeadlines(cfg.CallTimeout),
	}
	b.badFrames.log = cfg.Logger
	b.resync = startResync(node.Hub(), cfg.Logger)
	b.controlQueue = startControls(b.handleControl, cfg.Logger)
	b.engine, err = cfg.newEngine(b.deliver, b.onEvent)
	if err != nil {
		b.resync.stop()
		b.controlQueue.close()
		return nil, err
	}
	b.async, _ = b.engine.(shardcast.AsyncPublisher)
	b.keys = newKeyspace(b.engine, cfg.KeyPrefix)
	b.history = newHistory(b.engine, b.keys, cfg.engineOptions().Raw, node.Config().HistoryMetaTTL, cfg.NewEpochOnServerChange)
	return b, nil
}

// callCtx bounds one call Centrifuge makes.
func (b *Broker) callCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), b.callTimeout)
}

// checkChannels refuses the control channel, and with a MapBroker the
// channels that carry map channels: a client subscribing to one would
// otherwise unsubscribe the node from it on leaving.
func (b *Broker) checkChannels(channels ...string) error {
	mb := b.maps.Load()
	for _, ch := range channels {
		if ch == b.control {
			return fmt.Errorf("%w: %q", ErrReservedChannel, ch)
		}
		if mb != nil && strings.HasPrefix(ch, mb.prefix) {
			return fmt.Errorf("%w: %q starts with MapConfig.ChannelPrefix", ErrReservedChannel, ch)
		}
	}
	return nil
}

// RegisterBrokerEventHandler is called by node.Run; publications, joins
// and leaves received from then on go to h.
func (b *Broker) RegisterBrokerEventHandler(h centrifuge.BrokerEventHandler) error {
	b.events.Store(&h)
	return nil
}

// Subscribe subscribes the node to channels and returns once Redis
// confirmed every one, waiting up to Config.CallTimeout while a Redis node
// is unreachable.
func (b *Broker) Subscribe(channels ...string) error {
	if err := b.checkChannels(channels...); err != nil {
		return err
	}
	ctx, cancel := b.callCtx()
	defer cancel()
	since := b.resync.begin()
	if err := b.engine.Subscribe(ctx, channels...); err != nil {
		return err
	}
	b.resync.confirmed(channels, since)
	return nil
}

// Unsubscribe unsubscribes the node from channels.
func (b *Broker) Unsubscribe(channels ...string) error {
	if err := b.checkChannels(channels...); err != nil {
		return err
	}
	b.resync.forget(channels)
	ctx, cancel := b.callCtx()
	defer cancel()
	return b.engine.Unsubscribe(ctx, channels...)
}

// Publish sends data to the subscribers of ch on every node, at most
// once. A publish with history (HistorySize and HistoryTTL both set) or
// an IdempotencyKey runs one script on the channel's Redis node that
// appends the publication to the channel's history stream, assigning its
// offset, and publishes it, atomically; the result carries its stream
// position, or says why it was suppressed (an earlier publish with the
// same IdempotencyKey, an equal or newer Version). Without history the
// StreamPosition is zero.
func (b *Broker) Publish(ch string, data []byte, opts centrifuge.PublishOptions) (centrifuge.PublishResult, error) {
	if err := b.checkChannels(ch); err != nil {
		return centrifuge.PublishResult{}, err
	}
	if (opts.HistorySize > 0 && opts.HistoryTTL > 0) || opts.IdempotencyKey != "" {
		return b.history.publishScripted(b.deadlines.get(), ch, data, opts)
	}
	bp := framePool.Get().(*[]byte)
	frame, err := appendPublication(*bp, data, opts)
	if err != nil {
		return centrifuge.PublishResult{}, err
	}
	if err := b.publish(ch, frame); err != nil {
		return centrifuge.PublishResult{}, err
	}
	releaseFrame(bp, frame)
	return centrifuge.PublishResult{}, nil
}

// PublishJoin tells the subscribers of ch on every node that info joined.
func (b *Broker) PublishJoin(ch string, info *centrifuge.ClientInfo) error {
	return b.publishInfo(kindJoin, ch, info)
}

// PublishLeave tells the subscribers of ch on every node that info left.
func (b *Broker) PublishLeave(ch string, info *centrifuge.ClientInfo) error {
	return b.publishInfo(kindLeave, ch, info)
}

// errInterrupted is returned by PublishJoin and PublishLeave for a
// channel whose subscription on this node is interrupted.
var errInterrupted = errors.New("centrifugebroker: not sent: the channel's Redis server is unreachable from this node")

func (b *Broker) publishInfo(k kind, ch string, info *centrifuge.ClientInfo) error {
	if err := b.checkChannels(ch); err != nil {
		return err
	}
	// While the channel is interrupted, a publish would wait for Redis to
	// come back: each client the resync unsubscribes, and each one that
	// resubscribes meanwhile, would hold its leave or join that long, and
	// the resync would crawl. Centrifuge ignores the error; join and leave
	// messages are best-effort, and the channel's subscribers elsewhere
	// are being told to resubscribe too when the server is down for them.
	if b.resync.isInterrupted(ch) {
		return fmt.Errorf("%w: %s on %q", errInterrupted, k, ch)
	}
	frame, err := encodeInfo(k, info)
	if err != nil {
		return err
	}
	return b.publish(ch, frame)
}

// publish publishes frame on ch and waits for Redis's reply, bounded by
// the shared deadline. It goes through the engine's PublishAsync, waiting
// for its outcome: a message queued while earlier ones await their
// replies goes out in one write with the others queued meanwhile, where a
// Publish each costs a write syscall each. A message PublishAsync reports
// as not sent (a redirection or a refusal for now, which PublishAsync
// does not follow) goes again through Publish, which follows them: not
// sent means that nobody received it, so delivery stays at most once.
func (b *Broker) publish(ch string, frame []byte) error {
	ctx := b.deadlines.get()
	if b.async == nil {
		return b.engine.Publish(ctx, ch, frame)
	}
	w := publishWaits.Get().(*publishWait)
	err := b.async.PublishAsync(ctx, ch, frame, w.fn)
	if err == nil {
		select {
		case err = <-w.ch:
		case <-ctx.Done():
			// The outcome still comes, to w.ch: w is left to it, not
			// pooled. The message may or may not have been published,
			// as when a Publish times out.
			return ctx.Err()
		}
	}
	publishWaits.Put(w)
	if err != nil && errors.Is(err, shardcast.ErrNotSent) && ctx.Err() == nil {
		return b.engine.Publish(ctx, ch, frame)
	}
	return err
}

// publishWait is one publish waiting for the outcome PublishAsync passes
// to fn. Pooled, with fn bound once, so that a publish allocates nothing.
type publishWait struct {
	ch chan error // buffered: fn runs on the engine's reader and must not block
	fn func(error)
}

var publishWaits = sync.Pool{New: func() any {
	w := &publishWait{ch: make(chan error, 1)}
	w.fn = func(err error) { w.ch <- err }
	return w
}}

// History returns the publications kept for ch that opts.Filter selects
// (Since: those after that position, or before it in Reverse; Limit: at
// most that many, 0 for none, -1 for all) and the stream's current
// position. A channel without history gets a new epoch, kept for
// opts.MetaTTL (default the node's Config.HistoryMetaTTL).
func (b *Broker) History(ch string, opts centrifuge.HistoryOptions) ([]*centrifuge.Publication, centrifuge.StreamPosition, error) {
	if err := b.checkChannels(ch); err != nil {
		return nil, centrifuge.StreamPosition{}, err
	}
	ctx, cancel := b.callCtx()
	defer cancel()
	return b.history.read(ctx, ch, opts)
}

// RemoveHistory deletes the publications kept for ch. Its epoch and
// offsets go on.
func (b *Broker) RemoveHistory(ch string) error {
	if err := b.checkChannels(ch); err != nil {
		return err
	}
	ctx, cancel := b.callCtx()
	defer cancel()
	return b.history.remove(ctx, ch)
}

// Close closes the shardcast broker and stops every goroutine the Broker
// started. Node.Shutdown calls it. It is idempotent; calls made after it
// fail with an error wrapping shardcast.ErrClosed.
func (b *Broker) Close(context.Context) error {
	b.closeOnce.Do(func() {
		b.closeErr = b.engine.Close()
		b.controlQueue.close()
		b.resync.stop()
		b.deadlines.stop()
	})
	return b.closeErr
}

// Stats are the Broker's counters.
type Stats struct {
	// Engine holds the shardcast broker's counters.
	Engine shardcast.Stats
	// BadFrames counts messages dropped because they were not frames of
	// this adapter: corrupt, from a foreign publisher, or of a kind that
	// does not belong on their channel.
	BadFrames uint64
	// Resubscribes counts client subscriptions the Broker unsubscribed
	// with the insufficient-state code after messages of their channel
	// may have been lost, so that the client resubscribes.
	Resubscribes uint64
	// Reconnects counts clients the Broker disconnected with
	// DisconnectInsufficientState for the same reason, because one of the
	// channels was a server-side subscription, which a client SDK does not
	// resubscribe by itself, so that the client reconnects.
	Reconnects uint64
	// ControlDrops counts control messages dropped because the queue of
	// control commands waiting for the node was full.
	ControlDrops uint64
}

// Stats returns the Broker's counters.
func (b *Broker) Stats() Stats {
	s := Stats{BadFrames: b.badFrames.count.Load(), Resubscribes: b.resync.unsubscribed.Load(),
		Reconnects: b.resync.disconnected.Load(), ControlDrops: b.controlQueue.dropped.Load()}
	if r, ok := b.engine.(interface{ Stats() shardcast.Stats }); ok {
		s.Engine = r.Stats()
	}
	return s
}
