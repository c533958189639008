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
