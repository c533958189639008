package centrifugebroker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/centrifugal/centrifuge"
	"github.com/shardcast/shardcast"
)

// Default values applied to a zero MapConfig field.
const (
	DefaultMapChannelPrefix  = "centrifuge.map."
	DefaultMapExpiryInterval = time.Second
)

// MapConfig configures a MapBroker. A zero field means its default.
type MapConfig struct {
	// ChannelPrefix starts the shardcast channel that carries a map
	// channel's publications: map channel "scores" travels on
	// ChannelPrefix + "scores" (default "centrifuge.map."), so that a map
	// channel and an ordinary channel of the same name never share a
	// subscription. The Broker then reserves the names that start with
	// it: its own calls on them fail with ErrReservedChannel. It must not
	// start the Broker's ControlChannel. Every node of one application
	// uses the same value.
	ChannelPrefix string
	// IdempotentResultTTL is how long the result of a call with an
	// IdempotencyKey is remembered when its IdempotentResultTTL is zero
	// (default DefaultIdempotentResultTTL).
	IdempotentResultTTL time.Duration
	// ExpiryInterval bounds how late the MapBroker removes the expired
	// entries (MapChannelOptions.KeyTTL) of the map channels its node is
	// subscribed to, publishing their removal (default 1 s; negative:
	// never): it visits a channel when its next entry falls due, at most
	// once per ExpiryInterval, so entries expiring within one interval go
	// in one script. Channels with nothing due cost nothing. Every call on
	// a channel also removes some first, so a channel nobody is subscribed
	// to sheds its expired entries when it is next used.
	ExpiryInterval time.Duration
}

// MapBroker is a centrifuge.MapBroker that keeps map channels' state and
// streams in Redis beside the channels, and carries their publications
// through a Broker's shardcast engine and connections: node-grouped on a
// cluster, one subscribe connection per node however many map channels.
// Each call runs one Lua script on the channel's Redis node (its slot's
// master on a cluster), bounded by the context and by the Broker's
// Config.CallTimeout for Subscribe and Unsubscribe; calls fail while that
// node is unreachable. It is safe for concurrent use.
//
// Channel options come from the node's Config.Map.GetMapChannelOptions,
// validated as Centrifuge does. A stream-backed channel's epoch changes
// when its meta is gone: expired (MetaTTL), cleared, or lost with its
// Redis server; clients holding a position of the old epoch get
// centrifuge.ErrorUnrecoverablePosition and resync. Centrifuge v0.40.1
// keeps ordered maps (the ordered channel option and the publish score)
// unexported, so no MapBroker outside its package is ever asked for them:
// state reads are unordered, MapReadStateOptions.Asc has no effect.
//
// Publications reach other nodes at most once, like the Broker's; when
// shardcast reports a loss the node's local subscribers of the channel
// are told to resubscribe, and Centrifuge's periodic position check
// catches what else a stream-backed channel missed.
type MapBroker struct {
	b       *Broker
	engine  scripter
	prefix  string
	options func(channel string) centrifuge.MapChannelOptions

	resultTTL time.Duration
	events    atomic.Pointer[centrifuge.BrokerEventHandler]

	sweeper   *expirySweeper // nil without expiry sweeps
	closeOnce sync.Once
}

var (
	_ centrifuge.MapBroker = (*MapBroker)(nil)
	_ centrifuge.Closer    = (*MapBroker)(nil)
)

// errMapRequest wraps what a call asks that its channel's mode or options
// cannot do. It wraps centrifuge.ErrorBadRequest.
var errMapRequest = fmt.Errorf("centrifugebroker: map: %w", centrifuge.ErrorBadRequest)

// NewMapBroker returns the map broker of b's engine; pass it to
// node.SetMapBroker before node.Run. node.Shutdown closes it. A Broker
// has at most one MapBroker. It fails, with an error wrapping
// shardcast.ErrInvalidConfig, if b is nil or already has one, or cfg is
// invalid.
//
//	b, err := centrifugebroker.New(node, cfg)
//	...
//	node.SetBroker(b)
//	mb, err := centrifugebroker.NewMapBroker(b, centrifugebroker.MapConfig{})
//	...
//	node.SetMapBroker(mb)
func NewMapBroker(b *Broker, cfg MapConfig) (*MapBroker, error) {
	if b == nil {
		return nil, fmt.Errorf("%w: centrifugebroker: nil Broker", shardcast.ErrInvalidConfig)
	}
	if cfg.ChannelPrefix == "" {
		cfg.ChannelPrefix = DefaultMapChannelPrefix
	}
	if cfg.IdempotentResultTTL == 0 {
		cfg.IdempotentResultTTL = DefaultIdempotentResultTTL
	}
	if cfg.ExpiryInterval == 0 {
		cfg.ExpiryInterval = DefaultMapExpiryInterval
	}
	switch {
	case strings.HasPrefix(b.control, cfg.ChannelPrefix):
		return nil, fmt.Errorf("%w: centrifugebroker: MapConfig.ChannelPrefix %q starts the control channel %q", shardcast.ErrInvalidConfig, cfg.ChannelPrefix, b.control)
	case cfg.IdempotentResultTTL < 0:
		return nil, fmt.Errorf("%w: centrifugebroker: MapConfig.IdempotentResultTTL = %v, want >= 0", shardcast.ErrInvalidConfig, cfg.IdempotentResultTTL)
	}
	m := &MapBroker{
		b:         b,
		prefix:    cfg.ChannelPrefix,
		options:   b.node.Config().Map.GetMapChannelOptions,
		resultTTL: cfg.IdempotentResultTTL,
	}
	m.engine, _ = b.engine.(scripter)
	if m.engine == nil {
		return nil, fmt.Errorf("%w: map broker: the engine cannot run scripts", ErrNotSupported)
	}
	if !b.maps.CompareAndSwap(nil, m) {
		return nil, fmt.Errorf("%w: centrifugebroker: the Broker already has a MapBroker", shardcast.ErrInvalidConfig)
	}
	if cfg.ExpiryInterval > 0 {
		m.sweeper = startExpirySweeper(m, cfg.ExpiryInterval)
	}
	return m, nil
}

// wire is the shardcast channel of map channel ch.
func (m *MapBroker) wire(ch string) string { return m.prefix + ch }

// channelOptions returns ch's options, resolved and validated as
// Centrifuge does.
func (m *MapBroker) channelOptions(ch string) (centrifuge.MapChannelOptions, error) {
	o, err := centrifuge.ResolveAndValidateMapChannelOptions(m.options, ch)
	if err != nil {
		return o, fmt.Errorf("centrifugebroker: map channel %q: %w", ch, err)
	}
	return o, nil
}

// RegisterEventHandler is called by node.Run; map publications received
// from then on go to h.
func (m *MapBroker) RegisterEventHandler(h centrifuge.BrokerEventHandler) error {
	m.events.Store(&h)
	return nil
}

// Subscribe subscribes the node to map channels and returns once Redis
// confirmed every one, waiting up to the Broker's Config.CallTimeout
// while a Redis node is unreachable.
func (m *MapBroker) Subscribe(channels ...string) error {
	ctx, cancel := m.b.callCtx()
	defer cancel()
	since := m.b.resync.begin()
	if err := m.b.engine.Subscribe(ctx, m.wires(channels)...); err != nil {
		return err
	}
	m.b.resync.confirmed(channels, since)
	if m.sweeper != nil {
		for _, ch := range channels {
			if o, err := m.channelOptions(ch); err == nil && o.Mode.HasExpiry() && o.KeyTTL > 0 {
				m.sweeper.subscribed(ch, o.KeyTTL)
			}
		}
	}
	return nil
}

// Unsubscribe unsubscribes the node from map channels.
func (m *MapBroker) Unsubscribe(channels ...string) error {
	if m.sweeper != nil {
		for _, ch := range channels {
			m.sweeper.unsubscribed(ch)
		}
	}
	m.b.resync.forget(channels)
	ctx, cancel := m.b.callCtx()
	defer cancel()
	return m.b.engine.Unsubscribe(ctx, m.wires(channels)...)
}

func (m *MapBroker) wires(channels []string) []string {
	out := make([]string, len(channels))
	for i, ch := range channels {
		out[i] = m.wire(ch)
	}
	return out
}

// Close stops the expiry sweeper; node.Shutdown calls it. The Broker's
// Close closes the connections. It is idempotent.
func (m *MapBroker) Close(context.Context) error {
	m.closeOnce.Do(func() {
		if m.sweeper != nil {
			m.sweeper.stop()
		}
	})
	return nil
}

// deliver hands a map publication received on map channel ch to the
// registered handler.
func (m *MapBroker) deliver(ch string, msg shardcast.Message) {
	f, err := decode(msg.Payload, msg.PublishedAt)
	if err == nil && f.kind != kindMapPublication && f.kind != kindMapDelta {
		err = errWrongChannel
	}
	if err != nil {
		m.b.badFrames.add(msg.Channel, len(msg.Payload), err)
		return
	}
	h := m.events.Load()
	if h == nil {
		return // before node.Run: nobody can be subscribed yet
	}
	clonePublicationData(&f) // see Broker.deliver
	_ = (*h).HandlePublication(ch, f.pub, f.sp, f.delta, f.prevPub)
	if m.sweeper != nil && !f.pub.Removed {
		m.sweeper.updated(ch)
	}
}

// lost tells the expiry sweeper that map channels (wire names; all
// subscribed ones if all) may have lost live updates.
func (m *MapBroker) lost(wires []string, all bool) {
	if m.sweeper == nil {
		return
	}
	var channels []string
	for _, w := range wires {
		if ch, ok := strings.CutPrefix(w, m.prefix); ok {
			channels = append(channels, ch)
		}
	}
	m.sweeper.lost(channels, all)
}

// errBadMapReply reports a map script reply of the wrong shape: a foreign
// script under the same SHA, or keys another writer used.
var errBadMapReply = errors.New("centrifugebroker: unexpected reply from a map script")
