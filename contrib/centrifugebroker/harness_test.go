package centrifugebroker

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/centrifugal/centrifuge"
	gocent "github.com/centrifugal/centrifuge-go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// waitTimeout bounds every wait for a condition: the test machines are
// small, shared and run with -race.
const waitTimeout = 30 * time.Second

// waitFor polls cond every 10 ms until it holds, and fails the test with
// what() if waitTimeout passes first.
func waitFor(t *testing.T, cond func() bool, what func() string) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting: %s", what())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// testNode is a Centrifuge server node on the adapter, serving WebSocket
// clients from an httptest server.
type testNode struct {
	node     *centrifuge.Node
	broker   *Broker
	presence *PresenceManager // nil unless started with one
	maps     *MapBroker       // nil unless started with one
	url      string

	mu         sync.Mutex
	serverSubs map[string][]string // user → channels subscribed on connect
}

// subscribeOnConnect makes the node subscribe user's connections to
// channels server-side, in the connect reply: far cheaper than one
// client-side subscribe command per channel.
func (nd *testNode) subscribeOnConnect(user string, channels []string) {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	nd.serverSubs[user] = channels
}

// startNode starts a node whose Broker is built from cfg, and shuts it
// down when the test ends. Clients connect with their user ID as connect
// data; every subscription emits and receives join/leave messages, and
// clients may publish.
func startNode(t *testing.T, cfg Config) *testNode {
	t.Helper()
	return startNodeWith(t, cfg, nil, false)
}

// startNodeWith is startNode with, unless presence is nil, the Broker's
// PresenceManager built from presence as the node's: every subscription
// then emits presence, and clients may ask for presence and its stats;
// with maps, the Broker's MapBroker is the node's too (map channel
// options as mapChannelOptions gives them).
func startNodeWith(t *testing.T, cfg Config, presence *PresenceConfig, maps bool) *testNode {
	t.Helper()
	node, err := centrifuge.New(centrifuge.Config{
		LogLevel: centrifuge.LogLevelNone,
		// Above Centrifuge's default of 128: the scale test subscribes
		// each client to 1,000 channels.
		ClientChannelLimit: 2 * scaleChannels,
		Metrics:            centrifuge.MetricsConfig{RegistererGatherer: prometheus.NewRegistry()},
		Map:                centrifuge.MapConfig{GetMapChannelOptions: mapChannelOptions},
	})
	require.NoError(t, err)
	nd := &testNode{node: node, serverSubs: make(map[string][]string)}
	node.OnConnecting(func(_ context.Context, e centrifuge.ConnectEvent) (centrifuge.ConnectReply, error) {
		user := string(e.Data)
		reply := centrifuge.ConnectReply{Credentials: &centrifuge.Credentials{UserID: user}}
		nd.mu.Lock()
		defer nd.mu.Unlock()
		if chs := nd.serverSubs[user]; len(chs) > 0 {
			reply.Subscriptions = make(map[string]centrifuge.SubscribeOptions, len(chs))
			for _, ch := range chs {
				reply.Subscriptions[ch] = centrifuge.SubscribeOptions{}
			}
		}
		return reply, nil
	})
	node.OnConnect(func(c *centrifuge.Client) {
		c.OnSubscribe(func(e centrifuge.SubscribeEvent, cb centrifuge.SubscribeCallback) {
			if e.Type != centrifuge.SubscriptionTypeStream {
				// A map subscription (a centrifuge-js client's): Centrifuge
				// refuses a reply whose Type differs from the request's, and
				// takes recovery and positioning from the channel's mode.
				cb(centrifuge.SubscribeReply{Options: centrifuge.SubscribeOptions{Type: e.Type}}, nil)
				return
			}
			// Channels named hist-* keep history: their subscriptions
			// are recoverable.
			recover := strings.HasPrefix(e.Channel, historyChannelPrefix)
			cb(centrifuge.SubscribeReply{Options: centrifuge.SubscribeOptions{EmitJoinLeave: true, PushJoinLeave: true,
				EnableRecovery: recover, EmitPresence: presence != nil}}, nil)
		})
		if presence != nil {
			c.OnPresence(func(_ centrifuge.PresenceEvent, cb centrifuge.PresenceCallback) {
				cb(centrifuge.PresenceReply{}, nil)
			})
			c.OnPresenceStats(func(_ centrifuge.PresenceStatsEvent, cb centrifuge.PresenceStatsCallback) {
				cb(centrifuge.PresenceStatsReply{}, nil)
			})
		}
		c.OnPublish(func(_ centrifuge.PublishEvent, cb centrifuge.PublishCallback) {
			cb(centrifuge.PublishReply{}, nil)
		})
	})
	b, err := New(node, cfg)
	require.NoError(t, err)
	node.SetBroker(b)
	if presence != nil {
		nd.presence, err = NewPresenceManager(b, *presence)
		require.NoError(t, err)
		node.SetPresenceManager(nd.presence)
	}
	if maps {
		nd.maps, err = NewMapBroker(b, MapConfig{})
		require.NoError(t, err)
		node.SetMapBroker(nd.maps)
	}
	require.NoError(t, node.Run())
	mux := http.NewServeMux()
	// Generous write timeouts: on a loaded 2-core machine under -race a
	// write can stall past the 1 s default, and a client reconnecting for
	// that would muddle what the tests check.
	mux.Handle("/connection/websocket", centrifuge.NewWebsocketHandler(node, centrifuge.WebsocketConfig{WriteTimeout: 10 * time.Second}))
	srv := httptest.NewServer(mux)
	t.Cleanup(func() {
		srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		require.NoError(t, node.Shutdown(ctx))
		// Shutdown closes the broker; a second Close must be harmless.
		require.NoError(t, b.Close(ctx))
	})
	nd.broker, nd.url = b, "ws"+strings.TrimPrefix(srv.URL, "http")+"/connection/websocket"
	return nd
}

// startNodes starts n nodes on cfg and waits until each knows all of them:
// node discovery travels on the control channel.
func startNodes(t *testing.T, n int, cfg Config) []*testNode {
	t.Helper()
	nodes := make([]*testNode, n)
	for i := range nodes {
		nodes[i] = startNode(t, cfg)
	}
	for _, nd := range nodes {
		waitFor(t, func() bool {
			info, err := nd.node.Info()
			return err == nil && len(info.Nodes) == n
		}, func() string { return "every node to discover the others over the control channel" })
	}
	return nodes
}

// testClient is a centrifuge-go client connected to one node.
type testClient struct {
	c    *gocent.Client
	mu   sync.Mutex
	subs map[string]*testSub
	// disconnects records the codes of server-side disconnects;
	// reconnects those of disconnects the client reconnects after.
	disconnects, reconnects []uint32
	// server holds the data of publications on server-side
	// subscriptions, by channel, in arrival order.
	server map[string][]string
}

// testSub records what one subscription received.
type testSub struct {
	sub         *gocent.Subscription
	mu          sync.Mutex
	pubs        []string
	joins       []string // user IDs
	leaves      []string
	subscribing []uint32 // codes of unsubscribes that made the client resubscribe
	subscribed  int      // times the subscription became subscribed
	// subscribedEvents holds every SubscribedEvent: recovery results.
	subscribedEvents []gocent.SubscribedEvent
}

// connect connects a client for user to nd and closes it when the test
// ends.
func connect(t *testing.T, nd *testNode, user string) *testClient {
	t.Helper()
	tc := &testClient{subs: make(map[string]*testSub), server: make(map[string][]string)}
	tc.c = gocent.NewProtobufClient(nd.url, gocent.Config{Data: []byte(user),
		ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second, HandshakeTimeout: 10 * time.Second})
	tc.c.OnPublication(func(e gocent.ServerPublicationEvent) {
		tc.mu.Lock()
		tc.server[e.Channel] = append(tc.server[e.Channel], string(e.Data))
		tc.mu.Unlock()
	})
	tc.c.OnDisconnected(func(e gocent.DisconnectedEvent) {
		tc.mu.Lock()
		tc.disconnects = append(tc.disconnects, e.Code)
		tc.mu.Unlock()
	})
	tc.c.OnConnecting(func(e gocent.ConnectingEvent) {
		tc.mu.Lock()
		tc.reconnects = append(tc.reconnects, e.Code)
		tc.mu.Unlock()
	})
	t.Cleanup(tc.c.Close)
	require.NoError(t, tc.c.Connect())
	waitFor(t, func() bool { return tc.c.State() == gocent.StateConnected },
		func() string { return "client " + user + " to connect" })
	return tc
}

// subscribe subscribes the client to channels and waits until every
// subscription is confirmed.
func (tc *testClient) subscribe(t *testing.T, channels ...string) []*testSub {
	t.Helper()
	subs := tc.startSubscribe(t, channels...)
	waitSubscribed(t, subs)
	return subs
}

// startSubscribe asks for subscriptions to channels and returns at once.
func (tc *testClient) startSubscribe(t *testing.T, channels ...string) []*testSub {
	t.Helper()
	out := make([]*testSub, len(channels))
	for i, ch := range channels {
		sub, err := tc.c.NewSubscription(ch)
		require.NoError(t, err)
		ts := &testSub{sub: sub}
		sub.OnPublication(func(e gocent.PublicationEvent) {
			ts.mu.Lock()
			ts.pubs = append(ts.pubs, string(e.Data))
			ts.mu.Unlock()
		})
		sub.OnJoin(func(e gocent.JoinEvent) {
			ts.mu.Lock()
			ts.joins = append(ts.joins, e.User)
			ts.mu.Unlock()
		})
		sub.OnLeave(func(e gocent.LeaveEvent) {
			ts.mu.Lock()
			ts.leaves = append(ts.leaves, e.User)
			ts.mu.Unlock()
		})
		sub.OnSubscribing(func(e gocent.SubscribingEvent) {
			ts.mu.Lock()
			ts.subscribing = append(ts.subscribing, e.Code)
			ts.mu.Unlock()
		})
		sub.OnSubscribed(func(e gocent.SubscribedEvent) {
			ts.mu.Lock()
			ts.subscribedEvents = append(ts.subscribedEvents, e)
			ts.subscribed++
			ts.mu.Unlock()
		})
		require.NoError(t, sub.Subscribe())
		tc.mu.Lock()
		tc.subs[ch] = ts
		tc.mu.Unlock()
		out[i] = ts
	}
	return out
}

// waitSubscribed waits until every one of subs is subscribed.
func waitSubscribed(t *testing.T, subs []*testSub) {
	t.Helper()
	var pending int
	waitFor(t, func() bool {
		pending = 0
		for _, ts := range subs {
			if ts.sub.State() != gocent.SubStateSubscribed {
				pending++
			}
		}
		return pending == 0
	}, func() string { return fmt.Sprintf("%d of %d subscriptions still pending", pending, len(subs)) })
}

// received returns a copy of the publications' data, in arrival order.
func (ts *testSub) received() []string {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return append([]string(nil), ts.pubs...)
}

// has reports whether the subscription received data.
func (ts *testSub) has(data string) bool {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	for _, p := range ts.pubs {
		if p == data {
			return true
		}
	}
	return false
}

func (ts *testSub) events() (joins, leaves []string, subscribing []uint32, subscribed int) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return append([]string(nil), ts.joins...), append([]string(nil), ts.leaves...),
		append([]uint32(nil), ts.subscribing...), ts.subscribed
}

// subscribedEvents returns a copy of the subscription's SubscribedEvents.
func (ts *testSub) subscribedEventsCopy() []gocent.SubscribedEvent {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return append([]gocent.SubscribedEvent(nil), ts.subscribedEvents...)
}

func (tc *testClient) disconnectCodes() []uint32 {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	return append([]uint32(nil), tc.disconnects...)
}

// reconnectCodes returns the codes the client went back to connecting
// with, in order: the first is its own Connect call.
func (tc *testClient) reconnectCodes() []uint32 {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	return append([]uint32(nil), tc.reconnects...)
}

// serverReceived returns a copy of what the server-side subscription to
// channel received.
func (tc *testClient) serverReceived(channel string) []string {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	return append([]string(nil), tc.server[channel]...)
}

// serverCount returns how many server-side subscriptions got fewer than n
// publications, of channels.
func (tc *testClient) serverShort(channels []string, n int) int {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	short := 0
	for _, ch := range channels {
		if len(tc.server[ch]) < n {
			short++
		}
	}
	return short
}
