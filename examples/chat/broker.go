package main

import "github.com/centrifugal/centrifuge"

// setBroker gives the node the broker that carries publications, joins and
// leaves between nodes.
//
// Interim: Centrifuge's own Redis broker over the presence shard, until
// contrib/centrifugebroker (shardcast as Centrifuge's Broker) is merged.
func setBroker(node *centrifuge.Node, _ []string, shard *centrifuge.RedisShard) error {
	b, err := centrifuge.NewRedisBroker(node, centrifuge.RedisBrokerConfig{Shards: []*centrifuge.RedisShard{shard}})
	if err != nil {
		return err
	}
	node.SetBroker(b)
	return nil
}
