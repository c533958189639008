package cluster

import (
	"context"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/brokertest"
	"github.com/shardcast/shardcast/redistest"
)

// testConformance runs the Broker conformance suite on the package's
// shared cluster (see TestSharedCluster).
func testConformance(t *testing.T, c *redistest.Cluster) {
	brokertest.Run(t, brokertest.Harness{
		New: brokertest.Closing(func(opts shardcast.Options) (shardcast.Broker, error) {
			return New(Config{Addrs: c.Seeds(), Options: opts})
		}),
		KillSubscribers: func(t brokertest.T) {
			// Every node: a subscribe connection may sit on a replica only
			// by mistake, and killing none there costs nothing.
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			for _, s := range c.Nodes() {
				if _, err := s.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub"); err != nil {
					t.Errorf("CLIENT KILL TYPE pubsub on %s: %v", s.Addr(), err)
					t.FailNow()
				}
			}
		},
	})
}
