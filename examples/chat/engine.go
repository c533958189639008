package main

import (
	"fmt"
	"log/slog"

	"github.com/centrifugal/centrifuge"
	"github.com/shardcast/shardcast/cluster"
	"github.com/shardcast/shardcast/contrib/centrifugebroker"
	"github.com/shardcast/shardcast/sharded"
)

// The shardcast engines a chat can run on.
const (
	engineCluster = "cluster" // a Redis Cluster: sharded Pub/Sub, channels grouped by node
	engineSharded = "sharded" // standalone Redis instances: jump hash over their list
)

// engines lists them, the default first.
var engines = []string{engineCluster, engineSharded}

// redisConfig says which shardcast engine carries the chat and on which
// Redis. Every node of one chat uses the same.
type redisConfig struct {
	Engine string // engineCluster or engineSharded
	// Addrs are the cluster's seed addresses, or the standalone
	// instances, listed in the same order on every node.
	Addrs []string
}

// useShardcast makes one shardcast engine, on the Redis r names, the
// node's broker, controller and presence manager: publications, joins,
// leaves, Centrifuge's node-to-node control messages, each room's history
// and who is in it all go through the same connections, sharded the same
// way, each channel's keys beside the channel. Node.Shutdown closes it.
func useShardcast(node *centrifuge.Node, r redisConfig, logger *slog.Logger) error {
	cfg := centrifugebroker.Config{Logger: logger}
	switch r.Engine {
	case engineCluster:
		cfg.Cluster = &cluster.Config{Addrs: r.Addrs}
	case engineSharded:
		cfg.Sharded = &sharded.Config{Addrs: r.Addrs}
	default:
		return fmt.Errorf("shardcast: unknown engine %q, want %q or %q", r.Engine, engineCluster, engineSharded)
	}
	b, err := centrifugebroker.New(node, cfg)
	if err != nil {
		return err
	}
	node.SetBroker(b) // also sets it as the node's Controller
	// The page lists who is present (Presence) and never asks for counts
	// (PresenceStats), so no channel needs PresenceConfig.UserMapping.
	pm, err := centrifugebroker.NewPresenceManager(b, centrifugebroker.PresenceConfig{})
	if err != nil {
		return err
	}
	node.SetPresenceManager(pm)
	return nil
}
