package sharded

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/agreement"
	"github.com/shardcast/shardcast/internal/engine"
	"github.com/shardcast/shardcast/internal/layoutkey"
	"github.com/shardcast/shardcast/internal/pubconn"
	"github.com/shardcast/shardcast/internal/redisaddr"
	"github.com/shardcast/shardcast/internal/relayout"
	"github.com/shardcast/shardcast/internal/sentinel"
	"github.com/shardcast/shardcast/internal/subconn"
)

// Broker spreads channels over isolated Redis instances with a jump
// consistent hash and uses classic PUBLISH/SUBSCRIBE on each. It implements
// shardcast.Broker and is safe for concurrent use.
type Broker struct {
	core  *engine.Core
	conn  shardcast.ConnOptions
	conns int
	// slots holds the connections of every instance the broker uses, at a
	// fixed capacity: path p is subscribe connection p % conns of the
	// instance in slot p / conns. An online re-layout adds instances in
	// free slots and frees those it drops (docs/RELAYOUT.md); slotMu
	// serialises those changes.
	slots  []atomic.Pointer[slot]
	slotMu sync.Mutex
	// route maps channels to slots now; gate keeps Subscribe and
	// Unsubscribe out while a re-layout changes it.
	route atomic.Pointer[route]
	gate  relayout.Gate
	// hand holds back messages at a re-layout's switch; rel follows the
	// re-layouts (nil with Agreement.Off).
	hand *relayout.Handover
	rel  *relayout.Follower
	// member is the broker's entry in the layout registry, control the
	// connection to the instance that holds it (both nil with
	// Agreement.Off).
	member  *agreement.Member
	control *pubconn.Pub
	// controlMaster finds the control instance when Sentinel names it.
	controlMaster *sentinel.Group
	// publisher is the publish path (Publish, PublishAsync, Eval) over
	// publishRoute (route.go).
	publisher engine.Publisher[route, int]
	// retiring holds the links of masters Sentinel moved away from, until
	// their wire is gone (sentinel.go); under slotMu.
	retiring map[*engine.Link]bool
	// place keeps Sentinel shards' subscriptions on replicas (nil unless
	// SubscribeOn is Replicas).
	place *placer
	// readers are EvalRO's connections to the replicas slots subscribe
	// on (with SubscribeOn Replicas).
	readers engine.Readers
}

// slot is one Redis instance: its publishing connection and, on a
// broker that subscribes, its subscribe links.
type slot struct {
	// addr names the instance in the layout: its host:port, or
	// "sentinel/" and the master's name (then dial reaches the node
	// Sentinel named, and master follows it). pub publishes through dial;
	// the links subscribe through sub: the same node, or with
	// SubscribeOn Replicas one of a Sentinel shard's replicas.
	addr   string
	dial   subconn.Dialer
	sub    subconn.Dialer
	pub    *pubconn.Pub
	links  []*engine.Link
	master *masterWatch
	// sentinels are a Sentinel shard's Sentinels (host:port), which the
	// layout record keeps for brokers that do not know the shard.
	sentinels []string
}

// minSlots is the least number of instance slots a broker has: the
// instances of its layout and of a re-layout's target together may not
// exceed max(minSlots, 2 x the instances it started with).
const minSlots = 64

var _ shardcast.Broker = (*Broker)(nil)

// New connects to every address in cfg.Addrs and returns a broker. It fails
// if an address is malformed or an instance cannot be reached within
// DialTimeout, if an instance is a Redis Cluster node (an error wrapping
// shardcast.ErrWrongEngine: use cluster.New there), and, unless
// cfg.Agreement.Off is set, if the layout record on the control instance
// holds another instance list that live brokers use (an error wrapping
// shardcast.ErrLayoutMismatch) or cannot be read within
// Conn.CommandTimeout. A control instance that refuses the record's
// scripts with NOPERM (a user allowed Pub/Sub only) does not fail New:
// the broker runs without the record and logs one Warn that says so
// (see shardcast.Agreement). Subscribe connections are opened in the
// background; a Subscribe call waits for them. A broker that starts while
// an online re-layout is under way follows it before New returns (see
// Relayout). With cfg.Agreement.Follow set, a broker whose instance list
// differs from the recorded one adopts the recorded list instead of
// failing (see shardcast.Agreement.Follow).
func New(cfg Config) (*Broker, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	b, adopted, err := agreement.Follow(cfg, cfg.Agreement.Follow && !cfg.Agreement.Off, build, Config.follow)
	if err != nil {
		return nil, err
	}
	if adopted != nil {
		b.core.Log.Info("shardcast: adopted the recorded layout (Agreement.Follow)",
			"configured", fmt.Sprintf("%d instances: %s", len(cfg.Addrs), strings.Join(cfg.Addrs, ", ")),
			"recorded", adopted.Description, "fingerprint", adopted.Fingerprint)
	}
	return b, nil
}

// build is New for a validated cfg.
func build(cfg Config) (*Broker, error) {
	// Probes SubscribeOn turns on are for the replicas' wires only.
	relaysOnly := cfg.SubscribeOn != Masters && cfg.Conn.ProbeInterval == 0
	if relaysOnly {
		cfg.Conn.ProbeInterval = shardcast.DefaultRelayProbeInterval
	}
	opts, conn := cfg.Options.WithDefaults(), cfg.Conn.WithDefaults()
	targets := make([]redisaddr.Target, len(cfg.Addrs))
	addrs := make([]string, len(cfg.Addrs))
	for i, a := range cfg.Addrs {
		t, err := redisaddr.Parse(a, engine.Login(conn))
		if err != nil {
			return nil, err
		}
		targets[i], addrs[i] = t, t.ID
	}
	// Instances a re-layout adds come as host:port: they are dialled
	// with the credentials and TLS of Addrs' URLs, where those agree.
	b := &Broker{conn: engine.URLDefaults(cfg.Addrs, conn), conns: conn.SubscribeConns}
	b.slots = make([]atomic.Pointer[slot], max(minSlots, 2*len(addrs)))
	b.core = engine.NewCore(engine.CoreConfig{
		Options: opts, Conn: conn, Paths: len(b.slots) * b.conns, Mode: subconn.Classic, Trouble: b.troubleAt,
	})
	b.core.SetRouter(router{b})
	b.core.SetRouting(relayout.Routing{Gate: &b.gate, Closing: b.core.Closing(), Group: func(channels []string) []shardcast.Group {
		return b.groups(b.route.Load(), channels)
	}})
	b.publisher.Init(b.core, &b.route, publishRoute{b})
	b.readers.Timeouts = engine.PubTimeouts(b.conn)
	b.hand = relayout.NewHandover(b.core, cfg.HandoverLimit)
	r := &route{fp: fingerprint(addrs), addrs: addrs}
	for i, t := range targets {
		// Connect now, so that a wrong address or password fails New
		// rather than every later call.
		ctx, cancel := context.WithTimeout(b.core.Ctx(), conn.DialTimeout)
		sh, err := b.newSlot(ctx, t, conn)
		if err == nil {
			if b.core.Paths != nil {
				b.newLinks(i, sh)
			}
			b.slots[i].Store(sh)
			r.cur = append(r.cur, i)
			err = sh.pub.Ping(ctx)
		}
		if err != nil {
			err = fmt.Errorf("shardcast: connect shard %d (%s): %w", i, t.ID, err)
		} else {
			err = checkStandalone(ctx, sh.pub, i)
		}
		cancel()
		if err != nil {
			b.core.Close(b.teardown)
			return nil, err
		}
	}
	b.route.Store(r)
	if err := b.joinLayout(cfg, conn); err != nil {
		_ = b.Close()
		return nil, err
	}
	if cfg.SubscribeOn == Replicas && b.core.Paths != nil {
		ctx, cancel := context.WithTimeout(b.core.Ctx(), conn.CommandTimeout)
		b.place = &placer{avoid: make(map[string]time.Time),
			seq: engine.PlacementSeq(ctx, b.control, layoutkey.Placement(cfg.Agreement.WithDefaults()), b.core.Log)}
		cancel()
		b.placeFirst()
	}
	for i := range targets {
		b.watchMaster(i, b.slots[i].Load())
	}
	if b.core.Paths != nil {
		b.core.StartProbes(b.publisher.Send, relaysOnly)
		for i := range targets {
			for _, l := range b.slots[i].Load().links {
				l.Start()
			}
		}
		// Paths that fail to resubscribe after a reconnect are retried
		// every RecoveryInterval; there is no topology to poll.
		b.core.Maintain(0, nil)
	}
	b.rel.Start()
	return b, nil
}

// newLinks builds the subscribe links of slot i, before the slot is
// published to the router (a broker that subscribes only); Start runs
// them.
func (b *Broker) newLinks(i int, sh *slot) {
	links := make([]*engine.Link, b.conns)
	for j := range b.conns {
		path := i*b.conns + j // a path never leaves its link here
		deliver := func(l *engine.Link) func(string, []byte) {
			return func(channel string, payload []byte) { b.deliver(l, path, channel, payload) }
		}
		links[j] = b.core.NewLink(sh.sub, j, deliver, nil)
		// A replica's subscription proves itself only by a probe.
		links[j].Relayed.Store(sh.sub.Addr != sh.dial.Addr)
	}
	sh.links = links
}

// deliver hands a message that arrived on link l for path p to the core,
// unless a re-layout holds it back or it is a re-layout's barrier.
func (b *Broker) deliver(l *engine.Link, p int, channel string, payload []byte) {
	r := b.route.Load()
	b.hand.Deliver(l, p, channel, payload, r.barrier, func(channel string) (int, bool) {
		cur, next := r.slots(channel)
		return cur*b.conns + p%b.conns, cur != next && p/b.conns == next
	})
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
		t, err := redisaddr.Parse(a, redisaddr.Login{})
		if err != nil {
			return "", err
		}
		hosts[i] = t.ID
	}
	return fingerprint(hosts), nil
}

func fingerprint(hosts []string) string {
	sum := sha256.Sum256([]byte("sharded/v1\n" + strings.Join(hosts, "\n")))
	return "sharded-" + hex.EncodeToString(sum[:6])
}

// Fingerprint identifies the shard list and its order. Nodes of one
// application must report the same value, or they will miss each other's
// messages. After an online re-layout it is the new layout's.
func (b *Broker) Fingerprint() string { return b.route.Load().fp }

// Shard returns the index in the instance list in force (Config.Addrs,
// until an online re-layout replaced it) of the instance that carries
// channel.
func (b *Broker) Shard(channel string) int { return InstanceOf(channel, len(b.route.Load().cur)) }

// Instances returns the instance list in force, as host:port: Config.Addrs
// until an online re-layout replaced it.
func (b *Broker) Instances() []string { return append([]string(nil), b.route.Load().addrs...) }

// SubscribedOn returns, for each instance of the list in force (see
// Instances), the host:port its subscriptions are on: the instance itself,
// the master Sentinel names now, or with SubscribeOn Replicas the replica
// the broker picked. It is nil on a publish-only broker.
func (b *Broker) SubscribedOn() []string {
	if b.core.Paths == nil {
		return nil
	}
	r := b.route.Load()
	out := make([]string, len(r.cur))
	for i, si := range r.cur {
		if sh := b.slots[si].Load(); sh != nil {
			out[i] = sh.sub.Addr
		}
	}
	return out
}

// Publish sends payload to channel's shard with PUBLISH and returns once
// Redis accepted it. Concurrent calls share writes: while one write is in
// flight, the commands of other callers gather for the next, so there is
// no flush delay for a lone publisher and few syscalls under load. An
// error that wraps shardcast.ErrNotSent means Redis certainly did not get
// the message, so resending it cannot publish it twice.
func (b *Broker) Publish(ctx context.Context, channel string, payload []byte) error {
	return b.publisher.Publish(ctx, channel, payload)
}

// Eval runs script s on the instance that carries channel, with keys as
// KEYS and args as ARGV, on the broker's pipelined connection to it, and
// returns the script's reply: string, int64, nil or []any; an error reply
// is the error (a NOSCRIPT is handled: the script is then sent whole). The
// keys must be meant for that instance, which naming them after the
// channel ensures. A script that publishes to WireChannel(channel)
// reaches the channel's subscribers, atomically with what else it does;
// its payload must be a shardcast envelope unless Options.Raw is set.
// During an online re-layout a moving channel's script runs where its
// publishes go; keys it keeps on the old instance are not moved. As
// with Publish, an error that wraps shardcast.ErrNotSent means the script
// certainly did not run.
func (b *Broker) Eval(ctx context.Context, channel string, s *shardcast.Script, keys []string, args ...string) (any, error) {
	return b.publisher.Eval(ctx, channel, s, keys, args...)
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

// groups groups channels by the paths they are wanted on under r: their
// path under the layout in force and, during a re-layout, a moving
// channel's path under the next one too.
func (b *Broker) groups(r *route, channels []string) []shardcast.Group {
	rt := router{b}
	if r.next == nil {
		return shardcast.GroupByPartition(channels, rt.PathOf)
	}
	return relayout.TwinGroups(channels, func(ch string) (int, int) {
		cur, next := r.slots(ch)
		sub := b.subIndex(ch)
		if next == cur {
			return cur*b.conns + sub, -1
		}
		return cur*b.conns + sub, next*b.conns + sub
	})
}

// subIndex returns which of an instance's subscribe connections carries
// channel.
func (b *Broker) subIndex(channel string) int {
	if b.conns > 1 {
		return int(xxhash.Sum64String(channel) % uint64(b.conns))
	}
	return 0
}

// Stats returns the broker's counters.
func (b *Broker) Stats() shardcast.Stats { return b.core.Stats() }

// NodeStats returns the counters of each instance, in the order of the
// instance list in force (see Instances).
func (b *Broker) NodeStats() []shardcast.NodeStats {
	r := b.route.Load()
	out := make([]shardcast.NodeStats, len(r.cur))
	for i, si := range r.cur {
		sh := b.slots[si].Load()
		if sh == nil {
			continue
		}
		out[i] = shardcast.NodeStats{Addr: sh.addr, Published: sh.pub.Published()}
		for _, l := range sh.links {
			out[i].Add(l.NodeStats())
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
	for i := range b.slots {
		if sh := b.slots[i].Load(); sh != nil {
			for _, l := range sh.links {
				l.Stop()
			}
			sh.pub.Close()
			sh.master.close()
		}
	}
	b.slotMu.Lock()
	for l := range b.retiring {
		l.Stop()
	}
	b.slotMu.Unlock()
	b.readers.Close()
	b.hand.Close()
}

// router tells the core where a channel lives: path p is subscribe
// connection p % conns of the instance in slot p / conns.
type router struct{ b *Broker }

func (r router) PathOf(channel string) int {
	if strings.HasPrefix(channel, engine.ProbeChannelPrefix) {
		// Probes test paths, whatever the layout: spread over every slot.
		return int(xxhash.Sum64String(channel) % uint64(len(r.b.slots)*r.b.conns))
	}
	cur, _ := r.b.route.Load().slots(channel)
	return cur*r.b.conns + r.b.subIndex(channel)
}

func (r router) KeyPrefix(int) string { return "" }

func (r router) Carrier(p int) *engine.Link {
	sh := r.b.slots[p/r.b.conns].Load()
	if sh == nil || sh.links == nil {
		return nil
	}
	return sh.links[p%r.b.conns]
}

func (r router) Carriers(ids []int) []*engine.Link {
	out := make([]*engine.Link, len(ids))
	for i, p := range ids {
		out[i] = r.Carrier(p)
	}
	return out
}

func (r router) Carried(l *engine.Link) []int {
	for i := range r.b.slots {
		if sh := r.b.slots[i].Load(); sh != nil {
			for j, x := range sh.links {
				if x == l {
					return []int{i*r.b.conns + j}
				}
			}
		}
	}
	return nil
}

func (r router) Links() []*engine.Link {
	var out []*engine.Link
	for i := range r.b.slots {
		if sh := r.b.slots[i].Load(); sh != nil {
			out = append(out, sh.links...)
		}
	}
	return out
}

func (r router) Describe(p int) string {
	if sh := r.b.slots[p/r.b.conns].Load(); sh != nil {
		return "shard " + sh.addr
	}
	return fmt.Sprintf("unused shard slot %d", p/r.b.conns)
}
