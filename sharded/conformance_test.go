package sharded

import (
	"context"
	"testing"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/brokertest"
)

// TestConformance runs the Broker conformance suite on three instances.
func TestConformance(t *testing.T) {
	servers := startServers(t, 3)
	brokertest.Run(t, brokertest.Harness{
		New: brokertest.Closing(func(opts shardcast.Options) (shardcast.Broker, error) {
			return New(Config{Addrs: addrs(servers...), Options: opts})
		}),
		KillSubscribers: func(t brokertest.T) {
			for _, s := range servers {
				if _, err := s.Do(context.Background(), "CLIENT", "KILL", "TYPE", "pubsub"); err != nil {
					t.Errorf("CLIENT KILL TYPE pubsub on %s: %v", s.Addr(), err)
					t.FailNow()
				}
			}
		},
	})
}
