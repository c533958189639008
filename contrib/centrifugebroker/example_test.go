package centrifugebroker_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/centrifugal/centrifuge"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/shardcast/shardcast/contrib/centrifugebroker"
	"github.com/shardcast/shardcast/internal/redistest"
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
	// History is not supported yet.
	_, err = node.Publish("news", []byte(`{"text":"kept"}`), centrifuge.WithHistory(100, time.Minute))
	fmt.Println("with history:", errors.Is(err, centrifugebroker.ErrNotSupported))
	// Output:
	// published: true
	// with history: true
}
