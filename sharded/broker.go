package sharded

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/agreement"
	"github.com/shardcast/shardcast/internal/engine"
	"github.com/shardcast/shardcast/internal/jump"
	"github.com/shardcast/shardcast/internal/pubconn"
	"github.com/shardcast/shardcast/internal/subconn"
)

// Broker spreads channels over isolated Redis instances with a jump
// consistent hash and uses classic PUBLISH/SUBSCRIBE on each. It implements
// shardcast.Broker and is safe for concurrent use.
type Broker struct {
	core   *engine.Core
	shards []shard
	fp     string
	// links holds the subscribe connections, shard by shard: path p is
	// carried by links[p], to shard p / conns.
	links []*engine.Link
	conns int
	// member is the broker's entry in the layout registry, control the
	// connection to the instance that holds it (both nil with
	// Agreement.Off).
	member  *agreement.Member
	control *pubconn.Pub
}

// shard is one Redis instance and its publishing connection.
type shard struct {
	addr string
	pub  *pubconn.Pub
}

var _ shardcast.Broker = (*Broker)(nil)

// New connects to every address in cfg.Addrs and returns a broker. It fails
// if an address is malformed or an instance cannot be reached within
// DialTimeout, and, unless cfg.Agreement.Off is set, if the layout record
// on the control instance holds another instance list that live brokers
// use (an error wrapping shardcast.ErrLayoutMismatch) or cannot be read
// within Conn.CommandTimeout. Subscribe connections are opened in the
// background; a Subscribe call waits for them.
func New(cfg Config) (*Broker, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	opts, conn := cfg.Options.WithDefaults(), cfg.Conn.WithDefaults()
	dials := make([]subconn.Dialer, len(cfg.Addrs))
	addrs := make([]string, len(cfg.Addrs))
	for i, a := range cfg.Addrs {
		d, err := engine.ParseAddr(a, conn)
		if err != nil {
			return nil, err
		}
		dials[i], addrs[i] = d, d.Addr
	}
	b := &Broker{fp: fingerprint(addrs), conns: conn.SubscribeConns}
	b.core = engine.NewCore(engine.CoreConfig{
		Options: opts, Conn: conn, Paths: len(addrs) * b.conns, Mode: subconn.Classic,
	})
	b.core.SetRouter(router{b})
	for i, d := range dials {
		sh := shard{addr: d.Addr, pub: pubconn.New(d, engine.PubTimeouts(conn))}
		b.shards = append(b.shards, sh)
		// Connect now, so that a wrong address or password fails New
		// rather than every later call.
		ctx, cancel := context.WithTimeout(b.core.Ctx(), conn.DialTimeout)
		err := sh.pub.Ping(ctx)
		cancel()
		if err != nil {
			b.core.Close(b.teardown)
			return nil, fmt.Errorf("shardcast: connect shard %d (%s): %w", i, d.Addr, err)
		}
	}
	if err := b.joinLayout(cfg, conn); err != nil {
		_ = b.Close()
		return nil, err
	}
	if b.core.Paths != nil {
		for _, d := range dials {
			for j := range b.conns {
				path := len(b.links) // a path never leaves its link here
				deliver := func(l *engine.Link, channel string, payload []byte) {
					b.core.DeliverFrom(l, path, channel, payload)
				}
				b.links = append(b.links, b.core.NewLink(d, j, deliver, nil))
			}
		}
		b.core.StartProbes(b.publish)
		for _, l := range b.links {
			l.Start()
		}
		// Paths that fail to resubscribe after a reconnect are retried
		// every RecoveryInterval; there is no topology to poll.
		b.core.Maintain(0, nil)
	}
	return b, nil
}

// Fingerprint returns the fingerprint a broker over addrs reports (see
// Broker.Fingerprint) without connecting: the hash of the instances'
// host:port in order, credentials and URL schemes left out
// (docs/LAYOUT.md gives the formula). Two address lists place every
// channel on the same instance exactly when their fingerprints are equal.
// It fails like New on a malformed address.
func Fingerprint(addrs []string) (string, error) {
	hosts := make([]string, len(addrs))
	for i, a := range addrs {
		d, err := engine.ParseAddr(a, shardcast.ConnOptions{})
		if err != nil {
			return "", err
		}
		hosts[i] = d.Addr
	}
	return fingerprint(hosts), nil
}

func fingerprint(hosts []string) string {
	sum := sha256.Sum256([]byte("sharded/v1\n" + strings.Join(hosts, "\n")))
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
// no flush delay for a lone publisher and few syscalls under load. An
// error that wraps shardcast.ErrNotSent means Redis certainly did not get
// the message, so resending it cannot publish it twice.
func (b *Broker) Publish(ctx context.Context, channel string, payload []byte) error {
	if err := b.core.CheckPublish(ctx, channel, payload); err != nil {
		return err
	}
	if err := b.publish(ctx, channel, payload); err != nil {
		return err
	}
	b.core.Published()
	return nil
}

// publish is Publish after the argument check, and without counting the
// message in Stats.Published: delivery probes are sent with it.
func (b *Broker) publish(ctx context.Context, channel string, payload []byte) error {
	sh := &b.shards[b.Shard(channel)]
	if err := sh.pub.Publish(ctx, channel, payload, b.core.Options.Raw, time.Now()); err != nil {
		if b.core.Closed() {
			return shardcast.ErrClosed // Close cut the call short
		}
		return fmt.Errorf("shardcast: publish to shard %s: %w", sh.addr, err)
	}
	return nil
}

// Eval runs script s on the instance that carries channel, with keys as
// KEYS and args as ARGV, on the broker's pipelined connection to it, and
// returns the script's reply: string, int64, nil or []any; an error reply
// is the error (a NOSCRIPT is handled: the script is then sent whole). The
// keys must be meant for that instance, which naming them after the
// channel ensures. A script that publishes to WireChannel(channel)
// reaches the channel's subscribers, atomically with what else it does;
// its payload must be a shardcast envelope unless Options.Raw is set. As
// with Publish, an error that wraps shardcast.ErrNotSent means the script
// certainly did not run.
func (b *Broker) Eval(ctx context.Context, channel string, s *shardcast.Script, keys []string, args ...string) (any, error) {
	if err := b.core.CheckChannel(ctx, channel); err != nil {
		return nil, err
	}
	sh := &b.shards[b.Shard(channel)]
	v, err := engine.Eval(ctx, sh.pub, s, keys, args)
	if err != nil && b.core.Closed() {
		return nil, shardcast.ErrClosed
	}
	return v, err
}

// WireChannel returns the name channel has on the wire: the channel a
// script run by Eval publishes to. The sharded engine sends channels as
// they are.
func (b *Broker) WireChannel(channel string) string { return channel }

// Subscribe subscribes channels and returns once Redis confirmed every one.
// While a shard is unreachable it waits, bounded by ctx. On error no
// channel of this call is left newly subscribed, unless a later Subscribe
// asked for it meanwhile: what it added on shards that answered is
// unsubscribed before it returns (bounded by Conn.CommandTimeout), and the
// undo of commands ctx cut short finishes in the background, ahead of any
// later call for these channels.
func (b *Broker) Subscribe(ctx context.Context, channels ...string) error {
	return b.core.Subscribe(ctx, channels)
}

// Unsubscribe unsubscribes channels. Unknown channels are ignored. The
// channels leave the broker's subscriptions at once; if ctx ends before
// Redis confirmed the UNSUBSCRIBE, the call returns nil and the command
// completes in the background, still ahead of any later call for these
// channels.
func (b *Broker) Unsubscribe(ctx context.Context, channels ...string) error {
	return b.core.Unsubscribe(ctx, channels)
}

// Stats returns the broker's counters.
func (b *Broker) Stats() shardcast.Stats { return b.core.Stats() }

// NodeStats returns the counters of each instance, in Config.Addrs order.
func (b *Broker) NodeStats() []shardcast.NodeStats {
	out := make([]shardcast.NodeStats, len(b.shards))
	for i, sh := range b.shards {
		out[i] = shardcast.NodeStats{Addr: sh.addr, Published: sh.pub.Published()}
		if b.links != nil {
			for _, l := range b.links[i*b.conns : (i+1)*b.conns] {
				out[i].Add(l.NodeStats())
			}
		}
	}
	return out
}

// HotChannels returns the busiest channels the broker published and
// received over the last complete Options.HotWindow, estimated from the
// sampled messages, highest rate first (at most Options.HotTopK): nil
// before the first window ended or when detection is off. It allocates;
// call it when scraping metrics.
func (b *Broker) HotChannels() []shardcast.HotChannel { return b.core.HotChannels() }

// Latency returns histograms of the delivery lag (Publish to the moment a
// worker takes the message) and of Handler durations since the broker
// started. Unlike Stats it allocates; call it when scraping metrics.
func (b *Broker) Latency() shardcast.LatencyStats { return b.core.Latency() }

// Close closes every connection, waits for the broker's goroutines and
// the handlers of messages already queued, and makes later calls return
// ErrClosed. Then it leaves the layout registry (see
// shardcast.Agreement). It is idempotent. Do not call it from a Handler
// or OnEvent: it waits for them to return.
func (b *Broker) Close() error {
	b.core.Close(b.teardown)
	b.leaveLayout()
	return nil
}

func (b *Broker) teardown() {
	for _, l := range b.links {
		l.Stop()
	}
	for _, sh := range b.shards {
		sh.pub.Close()
	}
}

// router tells the core where a channel lives: path p is subscribe
// connection p % conns of shard p / conns.
type router struct{ b *Broker }

func (r router) PathOf(channel string) int {
	p := r.b.Shard(channel) * r.b.conns
	if r.b.conns > 1 {
		p += int(xxhash.Sum64String(channel) % uint64(r.b.conns))
	}
	return p
}

func (r router) Key(_ int, channel string) string { return channel }

func (r router) Carrier(p int) *engine.Link { return r.b.links[p] }

func (r router) Carried(l *engine.Link) []int {
	for p, x := range r.b.links {
		if x == l {
			return []int{p}
		}
	}
	return nil
}

func (r router) Links() []*engine.Link { return r.b.links }

func (r router) Describe(p int) string { return "shard " + r.b.shards[p/r.b.conns].addr }
