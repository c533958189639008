package centrifugebroker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/centrifugal/centrifuge"
	"github.com/centrifugal/protocol"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// centrifuge-go v0.12.1 has no map subscriptions, so the fault tests drive
// a node's map subscriptions with mapClient: a Centrifuge client the node
// runs in process (centrifuge.NewClient on a transport that decodes what
// the node writes), speaking the map subscribe protocol as an SDK would.
// It keeps the map as the client sees it, follows live publications, and
// when the node unsubscribes it with a code that asks for a resubscribe
// (insufficient state) it recovers from its position, or starts over from
// the state when that position is unrecoverable.

// errUnrecoverable is the code of centrifuge.ErrorUnrecoverablePosition.
var errUnrecoverable = centrifuge.ErrorUnrecoverablePosition.Code

// startMapClientNode runs a Centrifuge node with a Broker and MapBroker on
// cfg whose clients may subscribe to map channels, and returns it with its
// MapBroker's publications recorded (and handed on to the node). Its
// periodic position check is off (an hour apart): only live publications
// and the broker's loss reports keep its clients in step, which is what
// the fault tests check.
func startMapClientNode(t *testing.T, cfg Config) (*centrifuge.Node, *MapBroker, *mapTap) {
	t.Helper()
	node, err := centrifuge.New(centrifuge.Config{
		LogLevel:                        centrifuge.LogLevelNone,
		Metrics:                         centrifuge.MetricsConfig{RegistererGatherer: prometheus.NewRegistry()},
		Map:                             centrifuge.MapConfig{GetMapChannelOptions: faultChannelOptions},
		ClientChannelPositionCheckDelay: time.Hour,
	})
	require.NoError(t, err)
	node.OnConnect(func(c *centrifuge.Client) {
		c.OnSubscribe(func(e centrifuge.SubscribeEvent, cb centrifuge.SubscribeCallback) {
			cb(centrifuge.SubscribeReply{Options: centrifuge.SubscribeOptions{Type: centrifuge.SubscriptionTypeMap}}, nil)
		})
	})
	b, err := New(node, cfg)
	require.NoError(t, err)
	node.SetBroker(b)
	mb, err := NewMapBroker(b, MapConfig{})
	require.NoError(t, err)
	node.SetMapBroker(mb)
	require.NoError(t, node.Run())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		require.NoError(t, node.Shutdown(ctx))
	})
	tap := &mapTap{node: node, got: make(map[string]map[uint64]bool)}
	require.NoError(t, mb.RegisterEventHandler(tap))
	return node, mb, tap
}

// mapTap records the stream offsets of the map publications a node's
// MapBroker delivers, and hands them on to the node.
type mapTap struct {
	node *centrifuge.Node
	mu   sync.Mutex
	got  map[string]map[uint64]bool // channel → offsets
}

func (m *mapTap) HandlePublication(ch string, pub *centrifuge.Publication, sp centrifuge.StreamPosition, delta bool, prev *centrifuge.Publication) error {
	m.mu.Lock()
	if m.got[ch] == nil {
		m.got[ch] = make(map[uint64]bool)
	}
	m.got[ch][pub.Offset] = true
	m.mu.Unlock()
	return m.node.HandlePublication(ch, pub, sp, delta, prev)
}
func (m *mapTap) HandleJoin(string, *centrifuge.ClientInfo) error  { return nil }
func (m *mapTap) HandleLeave(string, *centrifuge.ClientInfo) error { return nil }

// delivered reports whether the node got ch's publication at offset.
func (m *mapTap) delivered(ch string, offset uint64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.got[ch][offset]
}

// mapClient is one client of a node subscribed to one map channel.
type mapClient struct {
	node *centrifuge.Node
	ch   string

	mu      sync.Mutex
	client  *centrifuge.Client
	closeFn centrifuge.ClientCloseFunc
	nextID  uint32
	waiting map[uint32]chan *protocol.Reply
	fresh   map[uint32]bool // subscribe commands that start from the state

	live   bool
	pos    centrifuge.StreamPosition
	state  map[string]string // key → data
	report mapClientReport
	// held is what the client built its map from since it last started
	// over from the state: the state's entries and every publication
	// applied since, recovered or live (see checkHeld).
	held []heldEntry
	seen map[string]bool // data of every entry a publication ever set
	hold chan struct{}   // while not nil, resubscribes wait for it to close

	wake chan struct{}
	quit chan struct{}
	done chan struct{}
}

// mapClientReport is what a mapClient went through.
type mapClientReport struct {
	Resyncs       int      // unsubscribes asking to resubscribe (insufficient state)
	Recovered     int      // resubscribes that recovered from the position
	Unrecoverable int      // recoveries refused: the client started over from the state
	Disconnects   []uint32 // codes of connections the node closed
	Gaps          []string // live publications out of sequence: silent losses
	Failures      []string // subscribes refused for another reason, unsubscribes for good
}

// newMapClient connects a client to node and subscribes it to map channel
// ch, from the state; it returns once the subscription is live. Its
// goroutine resubscribes whenever the node tells it to, until the test
// ends.
func newMapClient(t *testing.T, node *centrifuge.Node, ch string) *mapClient {
	t.Helper()
	c := &mapClient{node: node, ch: ch, waiting: make(map[uint32]chan *protocol.Reply), fresh: make(map[uint32]bool),
		state: make(map[string]string), seen: make(map[string]bool), wake: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
	go c.run()
	t.Cleanup(c.close)
	c.signal()
	waitFor(t, func() bool { _, _, live, _ := c.view(); return live },
		func() string { return "client of " + ch + " to go live: " + fmt.Sprint(c.reportCopy()) })
	return c
}

func (c *mapClient) signal() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *mapClient) close() {
	close(c.quit)
	<-c.done
	c.mu.Lock()
	closeFn := c.closeFn
	c.mu.Unlock()
	if closeFn != nil {
		_ = closeFn()
	}
}

// holdResubscribes makes the client wait before it subscribes again,
// from now until release is called: a client slow to resubscribe.
func (c *mapClient) holdResubscribes() (release func()) {
	hold := make(chan struct{})
	c.mu.Lock()
	c.hold = hold
	c.mu.Unlock()
	return func() {
		c.mu.Lock()
		c.hold = nil
		c.mu.Unlock()
		close(hold)
	}
}

// view returns the map as the client holds it, its position, and whether
// it is live.
func (c *mapClient) view() (map[string]string, centrifuge.StreamPosition, bool, mapClientReport) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.state), c.pos, c.live, c.reportLocked()
}

func (c *mapClient) reportCopy() mapClientReport {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reportLocked()
}

func (c *mapClient) reportLocked() mapClientReport {
	r := c.report
	r.Disconnects = append([]uint32(nil), r.Disconnects...)
	r.Gaps = append([]string(nil), r.Gaps...)
	r.Failures = append([]string(nil), r.Failures...)
	return r
}

// run connects and subscribes whenever the client is not live.
func (c *mapClient) run() {
	defer close(c.done)
	for {
		select {
		case <-c.quit:
			return
		case <-c.wake:
		}
		for {
			c.mu.Lock()
			live, connected, held := c.live, c.client != nil, c.hold
			c.mu.Unlock()
			if live {
				break
			}
			if held != nil {
				select {
				case <-c.quit:
					return
				case <-held:
				}
			}
			var err error
			if !connected {
				err = c.connect()
			}
			if err == nil {
				err = c.subscribe()
			}
			if err == nil {
				continue
			}
			select { // Redis unreachable: try again soon
			case <-c.quit:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
}

// connect makes a new connection.
func (c *mapClient) connect() error {
	ctx := centrifuge.SetCredentials(context.Background(), &centrifuge.Credentials{UserID: "map-client"})
	client, closeFn, err := centrifuge.NewClient(ctx, c.node, &mapTransport{c: c})
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.client, c.closeFn = client, closeFn
	c.mu.Unlock()
	r, err := c.command(&protocol.Command{Connect: &protocol.ConnectRequest{}}, false)
	if err == nil && r.Error != nil {
		err = fmt.Errorf("connect: %v", r.Error)
	}
	return err
}

// subscribe subscribes the client: recovering from its position if it has
// one, from the state otherwise, following the phases the node answers
// with until it is live.
func (c *mapClient) subscribe() error {
	c.mu.Lock()
	pos := c.pos
	c.mu.Unlock()
	req := &protocol.SubscribeRequest{Channel: c.ch, Type: int32(centrifuge.SubscriptionTypeMap), Limit: 1000}
	fresh := pos.Epoch == ""
	if fresh {
		req.Phase = centrifuge.MapPhaseState
	} else {
		req.Phase, req.Recover, req.Offset, req.Epoch = centrifuge.MapPhaseStream, true, pos.Offset, pos.Epoch
	}
	for range 100 {
		r, err := c.command(&protocol.Command{Subscribe: req}, fresh && req.Phase == centrifuge.MapPhaseState && req.Cursor == "")
		if err != nil {
			return err
		}
		if r.Error != nil {
			c.mu.Lock()
			defer c.mu.Unlock()
			if r.Error.Code == errUnrecoverable {
				c.report.Unrecoverable++
				c.pos = centrifuge.StreamPosition{} // start over from the state
			} else if r.Error.Code != centrifuge.ErrorInternal.Code {
				c.report.Failures = append(c.report.Failures, "subscribe: "+r.Error.String())
			}
			return fmt.Errorf("subscribe: %v", r.Error)
		}
		res := r.Subscribe
		switch res.Phase {
		case centrifuge.MapPhaseLive:
			if !fresh {
				c.mu.Lock()
				c.report.Recovered++
				c.mu.Unlock()
			}
			return nil
		case centrifuge.MapPhaseState:
			if res.Cursor == "" {
				req = &protocol.SubscribeRequest{Channel: c.ch, Type: req.Type, Limit: req.Limit,
					Phase: centrifuge.MapPhaseStream, Offset: res.Offset, Epoch: res.Epoch}
			} else {
				req.Cursor = res.Cursor
			}
		default:
			req = &protocol.SubscribeRequest{Channel: c.ch, Type: req.Type, Limit: req.Limit,
				Phase: centrifuge.MapPhaseStream, Offset: res.Offset, Epoch: res.Epoch}
		}
	}
	return errors.New("subscribe: too many pages")
}

// command sends cmd and waits for its reply; fresh marks a subscribe
// that starts over from the state.
func (c *mapClient) command(cmd *protocol.Command, fresh bool) (*protocol.Reply, error) {
	reply := make(chan *protocol.Reply, 1)
	c.mu.Lock()
	client := c.client
	c.nextID++
	cmd.Id = c.nextID
	c.waiting[cmd.Id] = reply
	c.fresh[cmd.Id] = fresh
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.waiting, cmd.Id)
		delete(c.fresh, cmd.Id)
		c.mu.Unlock()
	}()
	if client == nil || !client.HandleCommand(cmd, 0) {
		return nil, errors.New("connection closed")
	}
	select {
	case r := <-reply:
		return r, nil
	case <-time.After(waitTimeout):
		return nil, errors.New("no reply")
	case <-c.quit:
		return nil, errors.New("closing")
	}
}

// frame handles what the node wrote: replies and pushes, one encoded
// Reply each, in order.
func (c *mapClient) frame(messages ...[]byte) error {
	enc := protocol.NewProtobufDataEncoder()
	for _, m := range messages {
		if err := enc.Encode(m); err != nil {
			return err
		}
	}
	d := protocol.NewProtobufReplyDecoder(enc.Finish())
	for {
		r, err := d.Decode()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		c.handle(r)
	}
}

func (c *mapClient) handle(r *protocol.Reply) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r.Id != 0 {
		if r.Subscribe != nil {
			c.applySubscribeLocked(r.Subscribe, c.fresh[r.Id])
		}
		if w, ok := c.waiting[r.Id]; ok {
			w <- r
		}
		return
	}
	p := r.Push
	if p == nil || p.Channel != c.ch {
		return
	}
	switch {
	case p.Pub != nil:
		if !c.live {
			c.report.Gaps = append(c.report.Gaps, fmt.Sprintf("publication at %d while not subscribed", p.Pub.Offset))
			return
		}
		if p.Pub.Offset != c.pos.Offset+1 {
			c.report.Gaps = append(c.report.Gaps, fmt.Sprintf("live publication at %d after %d", p.Pub.Offset, c.pos.Offset))
		}
		c.applyLocked(p.Pub)
	case p.Unsubscribe != nil:
		c.live = false
		if p.Unsubscribe.Code < 2500 {
			c.report.Failures = append(c.report.Failures, "unsubscribed: "+p.Unsubscribe.String())
			return
		}
		c.report.Resyncs++
		c.signal()
	}
}

// applySubscribeLocked takes a subscribe reply's state and publications.
func (c *mapClient) applySubscribeLocked(res *protocol.SubscribeResult, fresh bool) {
	if fresh {
		c.state = make(map[string]string)
		c.held = nil
	}
	for _, p := range res.State {
		c.state[p.Key] = string(p.Data)
		c.held = append(c.held, heldEntry{offset: p.Offset, key: p.Key, data: string(p.Data)})
	}
	for _, p := range res.Publications {
		c.applyLocked(p)
	}
	c.pos = centrifuge.StreamPosition{Offset: res.Offset, Epoch: res.Epoch}
	c.live = res.Phase == centrifuge.MapPhaseLive
}

func (c *mapClient) applyLocked(p *protocol.Publication) {
	if p.Removed {
		delete(c.state, p.Key)
	} else {
		c.state[p.Key] = string(p.Data)
		c.seen[string(p.Data)] = true
	}
	c.held = append(c.held, heldEntry{offset: p.Offset, key: p.Key, data: string(p.Data), removed: p.Removed})
	c.pos.Offset = p.Offset
}

// heldEntry is a state entry or publication a mapClient applied, at its
// stream offset.
type heldEntry struct {
	offset    uint64
	key, data string
	removed   bool
}

// history returns what the client built its map from since it last
// started over from the state, and whether it ever applied a publication
// of data.
func (c *mapClient) history() ([]heldEntry, func(data string) bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	seen := maps.Clone(c.seen)
	return slices.Clone(c.held), func(data string) bool { return seen[data] }
}

// closed records the node closing the connection; run reconnects.
func (c *mapClient) closed(d centrifuge.Disconnect) {
	c.mu.Lock()
	c.report.Disconnects = append(c.report.Disconnects, d.Code)
	c.client, c.closeFn, c.live = nil, nil, false
	c.mu.Unlock()
	c.signal()
}

// mapTransport is a mapClient's connection: a bidirectional Protobuf
// transport without pings.
type mapTransport struct{ c *mapClient }

func (*mapTransport) Name() string                                { return "map-test" }
func (*mapTransport) AcceptProtocol() string                      { return "" }
func (*mapTransport) Protocol() centrifuge.ProtocolType           { return centrifuge.ProtocolTypeProtobuf }
func (*mapTransport) ProtocolVersion() centrifuge.ProtocolVersion { return centrifuge.ProtocolVersion2 }
func (*mapTransport) Unidirectional() bool                        { return false }
func (*mapTransport) Emulation() bool                             { return false }
func (*mapTransport) DisabledPushFlags() uint64                   { return 0 }
func (*mapTransport) PingPongConfig() centrifuge.PingPongConfig {
	return centrifuge.PingPongConfig{PingInterval: -1, PongTimeout: -1}
}
func (t *mapTransport) Write(data []byte) error        { return t.c.frame(data) }
func (t *mapTransport) WriteMany(data ...[]byte) error { return t.c.frame(data...) }
func (t *mapTransport) Close(d centrifuge.Disconnect) error {
	t.c.closed(d)
	return nil
}

// serverMap reads map channel ch's whole state as key → data, and its
// position.
func serverMap(ctx context.Context, m *MapBroker, ch string) (map[string]string, centrifuge.StreamPosition, error) {
	r, err := m.ReadState(ctx, ch, centrifuge.MapReadStateOptions{Limit: -1})
	if err != nil {
		return nil, centrifuge.StreamPosition{}, err
	}
	out := make(map[string]string, len(r.Publications))
	for _, p := range r.Publications {
		out[p.Key] = string(p.Data)
	}
	return out, r.Position, nil
}

// waitInStep waits until the client is live and holds the map and position
// Redis holds: nothing it missed went unreported.
func waitInStep(t *testing.T, c *mapClient, m *MapBroker) {
	t.Helper()
	var why string
	waitFor(t, func() bool {
		want, wantPos, err := serverMap(bg, m, c.ch)
		if err != nil {
			why = err.Error()
			return false
		}
		got, pos, live, _ := c.view()
		why = fmt.Sprintf("live %v at %+v, Redis at %+v; client has %d keys, Redis %d; differing: %v",
			live, pos, wantPos, len(got), len(want), diffKeys(got, want))
		return live && pos == wantPos && maps.Equal(got, want)
	}, func() string { return "the client of " + c.ch + " to be in step: " + why })
}

// checkHeld checks that the client's map comes from Redis's stream: every
// state entry and publication it built its map from since it last started
// over from the state is the publication the stream holds at that offset,
// under the epoch the client is at. A client that recovered from a
// position whose writes a failover lost, after new writes took their
// offsets, fails it though its map may look right again later: it kept
// writes Redis no longer has and skipped the ones that took their place.
// It reads the whole stream: the channel's must keep every publication
// the test made (bigMap).
func checkHeld(t *testing.T, c *mapClient, m *MapBroker) {
	t.Helper()
	r, err := m.ReadStream(bg, c.ch, centrifuge.MapReadStreamOptions{Filter: centrifuge.StreamFilter{Limit: -1}})
	require.NoError(t, err)
	_, pos, _, _ := c.view()
	require.Equal(t, r.Position.Epoch, pos.Epoch, "the client is at the stream's epoch")
	stream := make(map[uint64]*centrifuge.Publication, len(r.Publications))
	for _, p := range r.Publications {
		stream[p.Offset] = p
	}
	held, _ := c.history()
	var wrong []string
	for _, e := range held {
		p := stream[e.offset]
		if p == nil || p.Key != e.key || string(p.Data) != e.data || p.Removed != e.removed {
			wrong = append(wrong, fmt.Sprintf("offset %d: client %s=%q (removed %v), stream %v", e.offset, e.key, e.data, e.removed, p))
		}
	}
	assert.Empty(t, wrong[:min(len(wrong), 10)], "%d of the %d entries and publications the client holds are not the stream's: silently lost writes", len(wrong), len(held))
}

// diffKeys lists up to five keys whose values differ.
func diffKeys(a, b map[string]string) []string {
	var out []string
	for k := range mergeKeys(a, b) {
		if a[k] != b[k] && len(out) < 5 {
			out = append(out, k+": "+strconv.Quote(a[k])+" vs "+strconv.Quote(b[k]))
		}
	}
	return out
}

func mergeKeys(a, b map[string]string) map[string]struct{} {
	out := make(map[string]struct{}, len(a)+len(b))
	for k := range a {
		out[k] = struct{}{}
	}
	for k := range b {
		out[k] = struct{}{}
	}
	return out
}

// bigMap starts the map channels of the fault tests: recoverable, with a
// stream long enough to keep every publication a test makes, so that the
// whole stream can be checked against what was published.
const bigMap = "big-"

// faultChannelOptions are mapChannelOptions with bigMap channels.
func faultChannelOptions(ch string) centrifuge.MapChannelOptions {
	if strings.HasPrefix(ch, bigMap) {
		return centrifuge.MapChannelOptions{Mode: centrifuge.MapModeRecoverable, KeyTTL: time.Hour,
			StreamSize: 1 << 20, StreamTTL: time.Hour}
	}
	return mapChannelOptions(ch)
}

// mapUpdate is one publication a mapFeed made, at its stream position.
type mapUpdate struct {
	key, data string
	pos       centrifuge.StreamPosition
}

// mapFeed publishes to map channels from one goroutine until stopped:
// round r sets key "k<r mod 8>" of each channel to "<channel>/<r>". Each
// publish is retried until it succeeds (at most twice waitTimeout) under
// an idempotency key, so a retry of a publish that ran only returns its
// position: each round is in each stream once.
type mapFeed struct {
	m        *MapBroker
	channels []string

	mu   sync.Mutex
	sent map[string][]mapUpdate
	err  error

	rounds atomic.Int64
	stop   chan struct{}
	done   chan struct{}
}

func startMapFeed(t *testing.T, m *MapBroker, channels ...string) *mapFeed {
	f := &mapFeed{m: m, channels: channels, sent: make(map[string][]mapUpdate),
		stop: make(chan struct{}), done: make(chan struct{})}
	go f.run()
	t.Cleanup(func() { _ = f.halt() })
	return f
}

func (f *mapFeed) run() {
	defer close(f.done)
	for r := 1; ; r++ {
		for _, ch := range f.channels {
			u := mapUpdate{key: "k" + strconv.Itoa(r%8), data: ch + "/" + strconv.Itoa(r)}
			deadline := time.Now().Add(2 * waitTimeout)
			for {
				select {
				case <-f.stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(bg, 2*time.Second)
				res, err := f.m.Publish(ctx, ch, u.key, centrifuge.MapPublishOptions{Data: []byte(u.data), IdempotencyKey: u.data})
				cancel()
				if err == nil && res.Suppressed && res.SuppressReason != centrifuge.SuppressReasonIdempotency {
					err = fmt.Errorf("suppressed: %s", res.SuppressReason)
				}
				if err == nil {
					u.pos = res.Position
					break
				}
				if time.Now().After(deadline) {
					f.mu.Lock()
					f.err = fmt.Errorf("publish %q: %w", u.data, err)
					f.mu.Unlock()
					return
				}
			}
			f.mu.Lock()
			f.sent[ch] = append(f.sent[ch], u)
			f.mu.Unlock()
		}
		f.rounds.Store(int64(r))
	}
}

// halt stops the feed and returns the first publish that failed for good.
func (f *mapFeed) halt() error {
	select {
	case <-f.stop:
	default:
		close(f.stop)
	}
	<-f.done
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// waitRounds waits until the feed made n more rounds.
func (f *mapFeed) waitRounds(t *testing.T, n int64) {
	t.Helper()
	want := f.rounds.Load() + n
	waitFor(t, func() bool { return f.rounds.Load() >= want || f.failed() },
		func() string { return fmt.Sprintf("%d rounds of publications, at %d", want, f.rounds.Load()) })
}

func (f *mapFeed) failed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err != nil
}

// updates returns what the feed published to ch, in order.
func (f *mapFeed) updates(ch string) []mapUpdate {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]mapUpdate(nil), f.sent[ch]...)
}

// checkStream checks that ch's whole stream and state hold updates (the
// channel's publications, in order, the first at offset first) and
// nothing else, at contiguous offsets under epoch.
func checkStream(t *testing.T, m *MapBroker, ch string, updates []mapUpdate, first uint64, epoch string) {
	t.Helper()
	r, err := m.ReadStream(bg, ch, centrifuge.MapReadStreamOptions{Filter: centrifuge.StreamFilter{Limit: -1}})
	require.NoError(t, err)
	top := first + uint64(len(updates)) - 1
	assert.Equal(t, centrifuge.StreamPosition{Offset: top, Epoch: epoch}, r.Position, "%s: the stream's position", ch)
	var got, want []string
	for _, p := range r.Publications {
		if p.Offset >= first {
			got = append(got, fmt.Sprintf("%d:%s:%s", p.Offset, p.Key, p.Data))
		}
	}
	wantState := make(map[string]string)
	for i, u := range updates {
		offset := first + uint64(i)
		want = append(want, fmt.Sprintf("%d:%s:%s", offset, u.key, u.data))
		assert.Equal(t, centrifuge.StreamPosition{Offset: offset, Epoch: epoch}, u.pos, "%s: the position Publish returned", ch)
		wantState[u.key] = fmt.Sprintf("%d:%s", offset, u.data)
	}
	assert.Equal(t, want, got, "%s: every publication once, in order, at contiguous offsets", ch)
	s, sp := state(t, m, ch)
	assert.Equal(t, top, sp.Offset, ch)
	assert.Equal(t, epoch, sp.Epoch, ch)
	for k, v := range wantState {
		assert.Equal(t, v, s[k], "%s: key %s holds its last write at its offset", ch, k)
	}
}
