package main

import (
	"log/slog"

	"github.com/centrifugal/centrifuge"
	"github.com/shardcast/shardcast/cluster"
	"github.com/shardcast/shardcast/contrib/centrifugebroker"
)

// setBroker makes shardcast the node's broker and controller:
// publications, joins, leaves and Centrifuge's node-to-node control
// messages travel between nodes as sharded Pub/Sub on the Redis Cluster at
// addrs. Node.Shutdown closes it.
func setBroker(node *centrifuge.Node, addrs []string, logger *slog.Logger) error {
	b, err := centrifugebroker.New(node, centrifugebroker.Config{
		Cluster: &cluster.Config{Addrs: addrs},
		Logger:  logger,
	})
	if err != nil {
		return err
	}
	node.SetBroker(b) // also sets it as the node's Controller
	return nil
}
