package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/envelope"
	"github.com/shardcast/shardcast/internal/agreement"
	"github.com/shardcast/shardcast/internal/engine"
	"github.com/shardcast/shardcast/internal/pubconn"
	"github.com/shardcast/shardcast/internal/relayout"
	"github.com/shardcast/shardcast/internal/resp"
	"github.com/shardcast/shardcast/internal/subconn"
)

// Broker is the node-grouped sharded Pub/Sub engine for Redis Cluster. It
// implements shardcast.Broker and is safe for concurrent use.
type Broker struct {
	cfg  settings
	core *engine.Core
	// layout gives the slot of any partition number (wide: every tag, see
	// view.go). view maps channels to partitions, paths and wire keys
	// under the layout in force (and, during a re-layout, the next one);
	// the topology is kept for the partitions it reaches (view.span).
	// polls and pollsDone count the slot-map passes begun and ended, so
	// that a re-layout knows when one that saw its view was applied.
	layout           *shardcast.Layout
	view             atomic.Pointer[view]
	polls, pollsDone atomic.Uint64
	// route maps each partition to the publishing connection of its
	// master, rebuilt whenever the assignment changes.
	route atomic.Pointer[[]*pubconn.Pub]
	// partBase holds, for each bank, its paths' counters when a re-layout
	// last took it for a new layout (nil before): PartitionStats counts
	// from them, so that a partition's counters do not jump back to what
	// the bank counted under an earlier layout.
	partBase [2]atomic.Pointer[[]shardcast.PartitionStats]

	mu     sync.Mutex
	slots  shardcast.SlotMap
	shards shardMemory // which master each replica serves, across slot maps
	assign shardcast.Assignment
	// subs maps each partition to the node its subscriptions go to (its
	// master with SubscribeOn Masters; see placement), placed by
	// placeSeq, away from the nodes avoid holds until the time given.
	subs     shardcast.Assignment
	placeSeq uint64
	avoid    map[string]time.Time
	nodes    map[string][]*engine.Link // subscribe links by node address; Conn.SubscribeConns each
	pubs     map[string]*pubconn.Pub   // publishing connections, by master address
	// readers are EvalRO's connections to the nodes of subs that are not
	// their partition's master.
	readers  engine.Readers
	stopping bool

	topologyChanges atomic.Uint64
	// failoverMoves counts partition moves judged failovers (fenced, see
	// shardMemory.classifier).
	failoverMoves atomic.Uint64
	// migrationMoves counts the moves from one master to another judged
	// slot migrations (not fenced). A move from no master (slots that were
	// unowned a moment, as a failover can show) is neither: nothing
	// delivered the partition before it.
	migrationMoves atomic.Uint64
	// ownerlessMoves counts the moves from or to no master not judged
	// failovers.
	ownerlessMoves atomic.Uint64

	// stalls holds the publishes of masters whose connection stalled.
	stalls stallHolds
	// publisher is the publish path (Publish, PublishAsync, Eval) over
	// publishRoute.
	publisher engine.Publisher[view, dest]

	// member is the broker's layout registration (nil with
	// Agreement.Off).
	member *agreement.Member
	// gate keeps Subscribe and Unsubscribe out while a re-layout changes
	// the view; hand holds back messages at its switch; rel follows the
	// re-layouts (nil with Agreement.Off).
	gate relayout.Gate
	hand *relayout.Handover
	rel  *relayout.Follower
}

var _ shardcast.Broker = (*Broker)(nil)

// New reads the cluster's slot map from the first seed that answers and
// returns a broker; it fails if none does (unreachable, a wrong password,
// not a cluster node: a standalone instance gives an error wrapping
// shardcast.ErrWrongEngine that names sharded.New). A broker holds at most two connections per master:
// one that publishes and also carries its slot-map polls and health
// checks, opened on first use, and, with a Handler, one subscribe
// connection (Conn.SubscribeConns of them), opened in the background;
// Subscribe waits for them. A seed that is not a master it publishes to
// is asked on a connection of its own, closed after the answer. Unless
// cfg.Agreement.Off is set, New also fails if the cluster's layout record
// holds another partition count or prefix that live brokers use (an error
// wrapping shardcast.ErrLayoutMismatch), or if the record cannot be read
// within Conn.CommandTimeout. The record's scripts go over the publishing
// connection of the master of partition 0's slot, where the record lives.
// With cfg.Agreement.Follow set, a broker whose partition count or prefix
// differs from the recorded ones adopts them instead of failing (see
// shardcast.Agreement.Follow).
func New(cfg Config) (*Broker, error) {
	s, err := cfg.settings()
	if err != nil {
		return nil, err
	}
	b, adopted, err := agreement.Follow(s, s.Agreement.Follow && !s.Agreement.Off, build, settings.follow)
	if err != nil {
		return nil, err
	}
	if adopted != nil {
		b.core.Log.Info("shardcast: adopted the recorded layout (Agreement.Follow)",
			"configured", fmt.Sprintf("%d partitions, prefix %q", s.Partitions, s.Prefix),
			"recorded", adopted.Description, "fingerprint", adopted.Fingerprint)
	}
	return b, nil
}

// build is New for checked settings.
func build(s settings) (*Broker, error) {
	layout, err := shardcast.NewLayout(s.Partitions, s.Prefix)
	if err != nil {
		return nil, err
	}
	b := &Broker{
		cfg:    s,
		layout: wide,
		pubs:   make(map[string]*pubconn.Pub),
		nodes:  make(map[string][]*engine.Link),
		avoid:  make(map[string]time.Time),
	}
	b.readers.Timeouts = engine.PubTimeouts(s.Conn)
	b.view.Store(newView(layout, 0, [2]string{}))
	b.core = engine.NewCore(engine.CoreConfig{
		Options: s.Options, Conn: s.Conn, Paths: 2 * bankSize, Partitions: true, PartitionBank: bankSize,
		Mode: subconn.Sharded, Trouble: b.troubleAt, ConfirmReconnects: true,
	})
	b.core.SetRouter(router{b})
	b.core.SetRouting(relayout.Routing{Gate: &b.gate, Closing: b.core.Closing(), Group: func(channels []string) []shardcast.Group {
		return b.groups(b.view.Load(), channels)
	}})
	b.publisher.Init(b.core, &b.view, publishRoute{b})
	b.hand = relayout.NewHandover(b.core, s.HandoverLimit)
	pollCtx, pollCancel := context.WithTimeout(b.core.Ctx(), s.Conn.DialTimeout)
	slots, _, err := b.pollSlots(pollCtx)
	pollCancel()
	if err != nil {
		b.core.Close(b.teardown)
		return nil, wrongEngine(fmt.Errorf("shardcast: read cluster slot map: %w", err))
	}
	b.core.StartProbes(b.publisher.Send, s.probeRelaysOnly)
	if s.SubscribeOn != Masters && b.core.Paths != nil {
		b.placeSeq = b.placementSeq(slots)
	}
	b.applySlots(context.Background(), slots)
	b.core.Maintain(s.TopologyInterval, b.countedPoll)
	b.core.Go(b.watchRoles)
	if err := b.joinLayout(); err != nil {
		b.Close()
		return nil, err
	}
	b.rel.Start()
	return b, nil
}

// Layout returns the partition layout the broker publishes by: Config's,
// until an online re-layout replaced it. During a re-layout it is the new
// layout once the broker publishes under it (from the switch): for every
// channel, its partition under Layout is where Publish and Eval send it.
func (b *Broker) Layout() *shardcast.Layout { return b.view.Load().publishLayout() }

// Fingerprint identifies the partition count, tag table and prefix of the
// layout in force. Nodes of one application must report the same value.
// After an online re-layout it is the new layout's.
func (b *Broker) Fingerprint() string { return b.view.Load().cur.Fingerprint() }

// Publish sends payload with SPUBLISH to the master owning channel's
// partition, on that master's pipelined publishing connection. A publish
// the master redirected (MOVED, ASK: the slot moved) is resent to the
// node named, on the broker's connection to it, and one that could not be
// sent (its master is unreachable) is resent a few times, with backoff, to
// whichever master the slot map names by then; either makes the broker
// refresh its slot map. Nothing that may have run is resent: an error
// that wraps shardcast.ErrNotSent means the message was certainly not
// published.
func (b *Broker) Publish(ctx context.Context, channel string, payload []byte) error {
	return b.publisher.Publish(ctx, channel, payload)
}

// send SPUBLISHes channel's payload under keyPrefix ("{tag}." + prefix of
// partition p) to p's master.
func (b *Broker) send(ctx context.Context, p int, keyPrefix, channel string, payload []byte) error {
	pub, err := b.awaitRoute(ctx, p)
	if err != nil {
		return fmt.Errorf("shardcast: publish: %w", err)
	}
	now := engine.PublishTime()
	if pub != nil {
		err = pub.SPublish(ctx, keyPrefix, channel, payload, b.core.Options.Raw, now)
		if err == nil {
			return nil
		}
	}
	// No route (the slot map names no master for p's slot), or a failure
	// that may mean a stale one: a master that froze (the publish timed
	// out), died or gave its slot away.
	b.core.Kick()
	if pub == nil || resendable(ctx, err, p) {
		err = b.core.Resend(ctx, redirects{b, p}, pub, err, func(ctx context.Context, pub *pubconn.Pub, asking bool) error {
			if !asking {
				return pub.SPublishAgain(ctx, keyPrefix, channel, payload, b.core.Options.Raw, now)
			}
			// Redis 7 serves SPUBLISH on a migrating slot's source rather
			// than redirecting it with ASK; this path is for servers that do.
			msg := payload
			if !b.core.Options.Raw {
				msg = envelope.Append(nil, now, payload)
			}
			_, err := pub.DoAsking(ctx, "SPUBLISH", keyPrefix+channel, string(msg))
			return err
		})
	}
	if err == nil {
		return nil
	}
	if b.core.Closed() {
		return shardcast.ErrClosed // Close cut the call short
	}
	return fmt.Errorf("shardcast: publish: %w", err)
}

// Eval runs script s on the master of channel's partition, with keys as
// KEYS and args as ARGV, and returns its reply: string, int64, nil or
// []any; an error reply is the error (on NOSCRIPT the script is sent
// whole). Every key must hash to the channel's slot under Layout(): build
// it with Layout().PartitionKey(Layout().Partition(channel), name), or the
// call fails with ErrInvalidKey before anything is sent. A script that
// SPUBLISHes to WireChannel(channel) reaches the channel's subscribers,
// atomically with what else it does (a shardcast envelope unless
// Options.Raw is set). Redirections and commands that never left are
// resent as for Publish; an error that wraps shardcast.ErrNotSent means
// the script certainly did not run. A script's own error reply is never
// resent unless it copies Redis's word for word (a MOVED or ASK naming its
// own slot, a TRYAGAIN, CLUSTERDOWN or LOADING with the server's message).
// During an online re-layout a script follows the channel's publishes;
// keys kept under the old layout's tag are not moved (docs/RELAYOUT.md).
func (b *Broker) Eval(ctx context.Context, channel string, s *shardcast.Script, keys []string, args ...string) (any, error) {
	return b.publisher.Eval(ctx, channel, s, keys, args...)
}

// evalPartition runs s on the master of partition p, whose slot every key
// is in, following redirections like a publish; a housekeeping script (the
// layout record's) does not count in NodeStats' Published.
func (b *Broker) evalPartition(ctx context.Context, p int, s *shardcast.Script, keys, args []string, housekeeping bool) (any, error) {
	run := func(ctx context.Context, pub *pubconn.Pub, asking bool) (any, error) {
		switch {
		case housekeeping:
			return engine.EvalUncounted(ctx, pub, asking, s, keys, args)
		case asking:
			return engine.EvalAsking(ctx, pub, s, keys, args)
		default:
			return engine.Eval(ctx, pub, s, keys, args)
		}
	}
	pub, err := b.awaitRoute(ctx, p)
	if err != nil {
		return nil, err
	}
	var v any
	if pub != nil {
		v, err = run(ctx, pub, false)
		if err == nil {
			return v, nil
		}
		if b.core.Closed() {
			return nil, shardcast.ErrClosed
		}
		if !resendable(ctx, err, p) {
			if _, isReply := resp.IsServerError(err); !isReply {
				b.core.Kick() // a timeout or a lost wire may mean a stale route
			}
			return nil, err
		}
	}
	b.core.Kick()
	err = b.core.Resend(ctx, redirects{b, p}, pub, err, func(ctx context.Context, pub *pubconn.Pub, asking bool) error {
		var err error
		v, err = run(ctx, pub, asking)
		return err
	})
	if err != nil && b.core.Closed() {
		return nil, shardcast.ErrClosed
	}
	return v, err
}

// ErrInvalidKey is returned by Eval for a key outside the channel's slot.
var ErrInvalidKey = errors.New("shardcast: key not in the channel's slot")

// WireChannel returns the name channel has on the wire ("{tag}." + Prefix
// + channel) under Layout(): the channel a script run by Eval SPUBLISHes
// to.
func (b *Broker) WireChannel(channel string) string {
	_, keyPrefix, _ := b.view.Load().publishRoute(channel)
	return keyPrefix + channel
}

// Subscribe subscribes channels and returns once Redis confirmed every one.
// While a partition's master is unreachable (a failover, a slot move) it
// waits for the topology to settle, bounded by ctx. On error no channel of
// this call is left newly subscribed, unless a later Subscribe asked for it
// meanwhile: what it added on partitions that answered is unsubscribed
// before it returns (bounded by Conn.CommandTimeout), and the undo of
// commands ctx cut short finishes in the background, ahead of any later
// call for its partition.
func (b *Broker) Subscribe(ctx context.Context, channels ...string) error {
	return b.core.Subscribe(ctx, channels)
}

// Unsubscribe unsubscribes channels. Unknown channels are ignored. The
// channels leave the broker's subscriptions at once; if ctx ends before
// Redis confirmed the SUNSUBSCRIBE, the call returns nil and the command
// completes in the background, still ahead of any later call for these
// channels.
func (b *Broker) Unsubscribe(ctx context.Context, channels ...string) error {
	return b.core.Unsubscribe(ctx, channels)
}

// groups groups channels by the paths they are wanted on under v: their
// path under the layout in force and, during a re-layout, a moving
// channel's path under the next one too.
func (b *Broker) groups(v *view, channels []string) []shardcast.Group {
	if v.next == nil {
		return shardcast.GroupByPartition(channels, router{b}.PathOf)
	}
	return relayout.TwinGroups(channels, func(ch string) (int, int) {
		cur, next, moving := v.partitions(ch)
		if !moving {
			return v.curBank*bankSize + cur, -1
		}
		return v.curBank*bankSize + cur, v.nextBank*bankSize + next
	})
}

// watchRoles asks every master the broker publishes to for its ROLE once
// per HealthInterval, on its publishing connection, and asks for a
// slot-map poll when one has become a replica. A demoted master still
// accepts SPUBLISH (Redis 7.0 answers it on a replica and relays it over
// the cluster bus, late), so without this a publish-only broker, which
// hears of no failover otherwise, would route to it until its next
// TopologyInterval poll.
func (b *Broker) watchRoles() {
	tick := time.NewTicker(b.cfg.Conn.HealthInterval)
	defer tick.Stop()
	for {
		select {
		case <-b.core.Closing():
			return
		case <-tick.C:
		}
		b.mu.Lock()
		pubs := make([]*pubconn.Pub, 0, len(b.pubs))
		for _, p := range b.pubs {
			pubs = append(pubs, p)
		}
		b.mu.Unlock()
		var wg sync.WaitGroup
		var demoted atomic.Bool
		for _, p := range pubs {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(b.core.Ctx(), b.cfg.Conn.HealthTimeout)
				defer cancel()
				v, err := p.Do(ctx, "ROLE")
				if role, ok := v.([]any); err == nil && ok && len(role) > 0 && role[0] == "slave" {
					demoted.Store(true)
				}
			})
		}
		wg.Wait()
		if demoted.Load() {
			b.core.Log.Info("shardcast: a master the broker publishes to is a replica now; polling the slot map")
			b.core.RequestRefresh()
		}
	}
}

// messages returns what the wire of l calls with each message it reads.
func (b *Broker) messages(l *engine.Link) func(key string, payload []byte) {
	return func(key string, payload []byte) { b.onMessage(l, key, payload) }
}

// onMessage runs on the reader goroutine of l's wire. During a re-layout
// it takes the barrier, and holds back a moving channel's message that
// came under the new layout until the old layout's barrier arrived on the
// channel's old path.
func (b *Broker) onMessage(l *engine.Link, key string, payload []byte) {
	v := b.view.Load()
	path, channel, ok := v.split(key, b.core.Wants)
	if !ok {
		b.core.Log.Debug("shardcast: message on a key outside the layout", "key", strings.Clone(key)) // key is a view
		return
	}
	b.hand.Deliver(l, path, channel, payload, v.barrier, func(channel string) (int, bool) {
		cur, next, moving := v.partitions(channel)
		return v.curBank*bankSize + cur, moving && path == v.nextBank*bankSize+next
	})
}

// onLost runs on a wire's reader goroutine when the server unsubscribed a
// channel on its own: the channel's slot moved away from l's master.
//
// Off masters, l's node may just have been demoted (CLUSTER FAILOVER): a
// READONLY connection to it takes SSUBSCRIBE for the slots of its new
// master at once, while that master's cluster view does not list it as a
// replica yet and relays it nothing, so messages would be lost after a
// Restored. Until the next slot map says what the node is,
// l counts as relayed, so a resubscribe there is reported Restored only
// once a probe came back through it.
func (b *Broker) onLost(l *engine.Link, key string) {
	path, _, ok := b.view.Load().split(key, b.core.Wants)
	if !ok {
		return
	}
	if b.cfg.SubscribeOn != Masters {
		l.Relayed.Store(true)
	}
	b.core.NoteLost(l, path, shardcast.ErrSlotMoved)
}

// Stats returns the broker's counters.
func (b *Broker) Stats() shardcast.Stats { return b.core.Stats() }

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

// NodeStats returns the counters of each master the broker publishes to
// or holds subscribe connections to, sorted by address. A master that
// left the topology leaves its counters with it.
func (b *Broker) NodeStats() []shardcast.NodeStats {
	b.mu.Lock()
	byAddr := make(map[string]*shardcast.NodeStats)
	node := func(addr string) *shardcast.NodeStats {
		if byAddr[addr] == nil {
			byAddr[addr] = &shardcast.NodeStats{Addr: addr}
		}
		return byAddr[addr]
	}
	for addr, pub := range b.pubs {
		node(addr).Published = pub.Published()
	}
	for addr, links := range b.nodes {
		for _, l := range links {
			node(addr).Add(l.NodeStats())
		}
	}
	b.mu.Unlock()
	out := make([]shardcast.NodeStats, 0, len(byAddr))
	for _, st := range byAddr {
		out = append(out, *st)
	}
	slices.SortFunc(out, func(x, y shardcast.NodeStats) int { return strings.Compare(x.Addr, y.Addr) })
	return out
}

// PartitionStats returns the counters of every partition of the layout
// in force, by number; it is empty on a publish-only broker. A re-layout
// to a new prefix moves the partitions to paths of their own, whose
// counters start from zero then.
func (b *Broker) PartitionStats() []shardcast.PartitionStats {
	if b.core.Paths == nil {
		return []shardcast.PartitionStats{}
	}
	v := b.view.Load()
	var base []shardcast.PartitionStats
	if bp := b.partBase[v.curBank].Load(); bp != nil {
		base = *bp
	}
	out := make([]shardcast.PartitionStats, v.cur.Partitions())
	for p := range out {
		out[p] = b.core.PathStats(v.curBank*bankSize + p)
		out[p].Partition = p
		if p < len(base) {
			subStats(&out[p], base[p])
		}
	}
	return out
}

// takeBank records the counters of bank's paths as its base, before a
// re-layout subscribes a new layout's partitions there.
func (b *Broker) takeBank(bank int) {
	base := make([]shardcast.PartitionStats, bankSize)
	for p := range base {
		base[p] = b.core.PathStats(bank*bankSize + p)
	}
	b.partBase[bank].Store(&base)
}

// subStats subtracts base's counters from s's, none below zero.
func subStats(s *shardcast.PartitionStats, base shardcast.PartitionStats) {
	sub := func(x *uint64, y uint64) { *x -= min(*x, y) }
	sub(&s.Received, base.Received)
	sub(&s.Dropped, base.Dropped)
	sub(&s.BadFrames, base.BadFrames)
	sub(&s.Stale, base.Stale)
	s.Interrupted = max(0, s.Interrupted-base.Interrupted)
}

// Masters returns the masters of the slot map the broker follows, and
// the partitions of the layout in force each owns.
func (b *Broker) Masters() map[string][]int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.byNodeLocked(b.assign)
}

// SubscribedOn returns the nodes the broker holds subscribe connections
// to (or is connecting to), and the partitions of the layout in force each
// carries: the masters of Masters() with SubscribeOn Masters, and the
// nodes placement chose otherwise. It is empty on a publish-only broker.
func (b *Broker) SubscribedOn() map[string][]int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.nodes) == 0 {
		return map[string][]int{}
	}
	return b.byNodeLocked(b.subs)
}

// byNodeLocked groups the partitions of the layout in force by their node
// in a. The caller holds b.mu.
func (b *Broker) byNodeLocked(a shardcast.Assignment) map[string][]int {
	n := b.view.Load().cur.Partitions()
	out := make(map[string][]int)
	for _, addr := range a.Masters() {
		if parts := slices.DeleteFunc(a.PartitionsOf(addr), func(p int) bool { return p >= n }); len(parts) > 0 {
			out[addr] = parts
		}
	}
	return out
}

// Close leaves the layout registry (see shardcast.Agreement; bounded by
// about a second), closes every connection, waits for the broker's
// goroutines and the handlers of queued messages, and makes later calls
// return ErrClosed. It is
// idempotent. Do not call it from a Handler or OnEvent: it waits for
// them to return.
func (b *Broker) Close() error {
	b.member.Leave()
	b.core.Close(b.teardown)
	return nil
}

func (b *Broker) teardown() {
	b.stalls.work.Close() // the checks end with the broker's ctx
	b.mu.Lock()
	b.stopping = true
	nodes := b.nodes
	b.nodes = map[string][]*engine.Link{}
	pubs := b.pubs
	b.pubs = map[string]*pubconn.Pub{}
	b.route.Store(nil)
	b.mu.Unlock()
	b.readers.Close()
	for _, p := range pubs {
		p.Close()
	}
	for _, links := range nodes {
		for _, l := range links {
			l.Stop()
		}
	}
	b.hand.Close()
}
