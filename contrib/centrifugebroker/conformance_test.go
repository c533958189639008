package centrifugebroker

import (
	"context"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/brokertest"
	"github.com/shardcast/shardcast/cluster"
	"github.com/shardcast/shardcast/redistest"
	"github.com/shardcast/shardcast/sharded"
)

// TestConformance runs the shardcast Broker conformance suite on the
// engine broker as New builds it: the suite's Options go where a user's
// engine settings go, and its Handler and OnEvent where the adapter puts
// its own.
func TestConformance(t *testing.T) {
	build := func(cfg Config, opts shardcast.Options) (shardcast.Broker, error) {
		handler, onEvent := opts.Handler, opts.OnEvent
		opts.Handler, opts.OnEvent = nil, nil
		if cfg.Cluster != nil {
			cfg.Cluster.Options = opts
		} else {
			cfg.Sharded.Options = opts
		}
		cfg, err := cfg.withDefaults()
		if err != nil {
			return nil, err
		}
		return cfg.newEngine(handler, onEvent)
	}
	killSubscribers := func(servers []*redistest.Server) func(brokertest.T) {
		return func(t brokertest.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			for _, s := range servers {
				if _, err := s.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub"); err != nil {
					t.Errorf("CLIENT KILL TYPE pubsub on %s: %v", s.Addr(), err)
					t.FailNow()
				}
			}
		}
	}
	t.Run("sharded", func(t *testing.T) {
		a, b := redistest.StartStandalone(t), redistest.StartStandalone(t)
		brokertest.Run(t, brokertest.Harness{
			New: brokertest.Closing(func(opts shardcast.Options) (shardcast.Broker, error) {
				return build(Config{Sharded: &sharded.Config{Addrs: []string{a.Addr(), b.Addr()}}}, opts)
			}),
			KillSubscribers: killSubscribers([]*redistest.Server{a, b}),
		})
	})
	t.Run("cluster", func(t *testing.T) {
		// Its own cluster: the suite kills every subscribe connection.
		c := redistest.StartCluster(t, 3, 1)
		brokertest.Run(t, brokertest.Harness{
			New: brokertest.Closing(func(opts shardcast.Options) (shardcast.Broker, error) {
				return build(Config{Cluster: &cluster.Config{Addrs: c.Seeds()}}, opts)
			}),
			KillSubscribers: killSubscribers(c.Nodes()),
		})
	})
}
