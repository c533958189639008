package centrifugebroker_test

import (
	"context"
	"fmt"
	"time"

	"github.com/centrifugal/centrifuge"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/shardcast/shardcast/contrib/centrifugebroker"
	"github.com/shardcast/shardcast/redistest"
	"github.com/shardcast/shardcast/sharded"
)

// A Centrifuge node whose Pub/Sub runs on two Redis instances. With
// Cluster: &cluster.Config{Addrs: ...} instead of Sharded it runs on a
// Redis Cluster.
func ExampleNew() {
	addrs := redistest.OnDemandStandalone(2) // "10.0.0.1:6379", "10.0.0.2:6379" in production

	node, err := centrifuge.New(centrifuge.Config{
		Metrics: centrifuge.MetricsConfig{RegistererGatherer: prometheus.NewRegistry()},
	})
	if err != nil {
		panic(err)
	}
	b, err := centrifugebroker.New(node, centrifugebroker.Config{
		Sharded: &sharded.Config{Addrs: addrs},
	})
	if err != nil {
		panic(err)
	}
	node.SetBroker(b) // the node's Broker and Controller
	if err := node.Run(); err != nil {
		panic(err)
	}
	defer func() { _ = node.Shutdown(context.Background()) }() // closes b

	_, err = node.Publish("news", []byte(`{"text":"hello"}`))
	fmt.Println("published:", err == nil)
	// Kept for a minute, at most 100 publications: subscribers that
	// recover get what they missed.
	res, err := node.Publish("news", []byte(`{"text":"kept"}`), centrifuge.WithHistory(100, time.Minute))
	fmt.Println("with history:", err == nil, "offset", res.Offset)
	h, err := node.History("news", centrifuge.WithLimit(centrifuge.NoLimit))
	fmt.Println("history:", err == nil, len(h.Publications), "publication(s), top offset", h.Offset, "same epoch:", h.Epoch == res.Epoch)
	// Output:
	// published: true
	// with history: true offset 1
	// history: true 1 publication(s), top offset 1 same epoch: true
}

// Presence kept in Redis beside each channel, shared by every node: here
// one node adds two connections of one user, as it does when clients
// subscribe with presence, and reads them back.
func ExampleNewPresenceManager() {
	addrs := redistest.OnDemandStandalone(2) // "10.0.0.1:6379", "10.0.0.2:6379" in production

	node, err := centrifuge.New(centrifuge.Config{
		Metrics: centrifuge.MetricsConfig{RegistererGatherer: prometheus.NewRegistry()},
	})
	if err != nil {
		panic(err)
	}
	b, err := centrifugebroker.New(node, centrifugebroker.Config{Sharded: &sharded.Config{Addrs: addrs}})
	if err != nil {
		panic(err)
	}
	node.SetBroker(b)
	pm, err := centrifugebroker.NewPresenceManager(b, centrifugebroker.PresenceConfig{
		UserMapping: func(string) bool { return true }, // unique users counted in Redis
	})
	if err != nil {
		panic(err)
	}
	node.SetPresenceManager(pm) // uses b's connections; node.Shutdown closes them
	if err := node.Run(); err != nil {
		panic(err)
	}
	defer func() { _ = node.Shutdown(context.Background()) }()

	for _, client := range []string{"conn-1", "conn-2"} {
		if err := pm.AddPresence("example-room", client, &centrifuge.ClientInfo{ClientID: client, UserID: "alice"}); err != nil {
			panic(err)
		}
	}
	stats, err := node.PresenceStats("example-room")
	fmt.Println(err, stats.NumClients, "clients of", stats.NumUsers, "user")
	_ = pm.RemovePresence("example-room", "conn-1", "alice")
	p, err := node.Presence("example-room")
	fmt.Println(err, len(p.Presence), "client:", p.Presence["conn-2"].UserID)
	// Output:
	// <nil> 2 clients of 1 user
	// <nil> 1 client: alice
}

// Map channels kept in Redis beside each channel: a recoverable map whose
// entries expire a minute after their last write, a claim that only the
// first publisher wins, and the state a subscriber starts from.
func ExampleNewMapBroker() {
	addrs := redistest.OnDemandStandalone(2) // "10.0.0.1:6379", "10.0.0.2:6379" in production

	node, err := centrifuge.New(centrifuge.Config{
		Metrics: centrifuge.MetricsConfig{RegistererGatherer: prometheus.NewRegistry()},
		Map: centrifuge.MapConfig{GetMapChannelOptions: func(string) centrifuge.MapChannelOptions {
			return centrifuge.MapChannelOptions{Mode: centrifuge.MapModeRecoverable, KeyTTL: time.Minute}
		}},
	})
	if err != nil {
		panic(err)
	}
	b, err := centrifugebroker.New(node, centrifugebroker.Config{Sharded: &sharded.Config{Addrs: addrs}})
	if err != nil {
		panic(err)
	}
	node.SetBroker(b)
	mb, err := centrifugebroker.NewMapBroker(b, centrifugebroker.MapConfig{})
	if err != nil {
		panic(err)
	}
	node.SetMapBroker(mb) // uses b's connections; node.Shutdown closes both
	if err := node.Run(); err != nil {
		panic(err)
	}
	defer func() { _ = node.Shutdown(context.Background()) }()

	ctx := context.Background()
	_ = node.MapClear(ctx, "example-seats", centrifuge.MapClearOptions{})
	for _, who := range []string{"alice", "bob"} {
		r, err := node.MapPublish(ctx, "example-seats", "seat-1", centrifuge.MapPublishOptions{
			Data: []byte(who), KeyMode: centrifuge.KeyModeIfNew,
		})
		fmt.Printf("%v %s: suppressed %v %q\n", err, who, r.Suppressed, r.SuppressReason)
	}
	state, err := node.MapStateRead(ctx, "example-seats", centrifuge.MapReadStateOptions{Limit: -1})
	fmt.Println(err, state.Publications[0].Key, string(state.Publications[0].Data), "at offset", state.Position.Offset)
	// Output:
	// <nil> alice: suppressed false ""
	// <nil> bob: suppressed true "key_exists"
	// <nil> seat-1 alice at offset 1
}
