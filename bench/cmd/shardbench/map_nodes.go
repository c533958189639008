package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/centrifugal/centrifuge"

	"github.com/shardcast/shardcast/contrib/centrifugebroker"
)

// mapKeyTTL is every map channel's KeyTTL: entries a client stops
// refreshing (a cursor, a typing flag) go after a minute.
const mapKeyTTL = time.Minute

// mapChannelOptions is every map channel's options in both brokers:
// recoverable (a stream beside the state, so that clients resume from a
// position), Centrifuge's default stream size and TTLs, entries expiring
// after mapKeyTTL.
func mapChannelOptions(string) centrifuge.MapChannelOptions {
	return centrifuge.MapChannelOptions{Mode: centrifuge.MapModeRecoverable, KeyTTL: mapKeyTTL}
}

// mapNode is one node's map broker, the live updates it delivered, and
// what closes it.
type mapNode struct {
	mb    centrifuge.MapBroker
	live  *liveCounter
	close func()
}

// liveCounter is the BrokerEventHandler a run registers with each map
// broker in place of the node (which node.Run would register): it counts
// the live updates the broker delivers, which is all a node with no
// client does with them.
type liveCounter struct{ n atomic.Uint64 }

// HandlePublication counts one delivered map publication.
func (c *liveCounter) HandlePublication(string, *centrifuge.Publication, centrifuge.StreamPosition, bool, *centrifuge.Publication) error {
	c.n.Add(1)
	return nil
}

// HandleJoin ignores joins: map brokers send none.
func (c *liveCounter) HandleJoin(string, *centrifuge.ClientInfo) error { return nil }

// HandleLeave ignores leaves: map brokers send none.
func (c *liveCounter) HandleLeave(string, *centrifuge.ClientInfo) error { return nil }

// newMapNode builds one node (see engineNode), its map channels as
// mapChannelOptions says, and a map broker of the given kind subscribed
// to channels, with a liveCounter as its event handler in place of the
// node: centAdapter is contrib/centrifugebroker's MapBroker over the
// node's Broker; centRedis is Centrifuge's RedisMapBroker over its
// RedisShard, with sharded Pub/Sub over centPartitions partitions on a
// cluster, as the centrifuge scenario configures its RedisBroker.
func newMapNode(kind string, t callTopo, channels []string) (*mapNode, error) {
	n, err := newEngineNode(kind, t, centrifuge.Config{Map: centrifuge.MapConfig{GetMapChannelOptions: mapChannelOptions}})
	if err != nil {
		return nil, err
	}
	// Both engines' map brokers have a Close beside the interface.
	var mb interface {
		centrifuge.MapBroker
		Close(context.Context) error
	}
	if kind == centAdapter {
		mb, err = centrifugebroker.NewMapBroker(n.broker, centrifugebroker.MapConfig{})
	} else {
		mc := centrifuge.RedisMapBrokerConfig{Shards: []*centrifuge.RedisShard{n.shard}}
		if t.cluster() {
			mc.NumShardedPubSubPartitions, mc.UsePrecomputedPartitionTags = centPartitions, true
		}
		if mb, err = centrifuge.NewRedisMapBroker(n.node, mc); err != nil {
			err = fmt.Errorf("centrifuge map broker: %w", err)
		}
	}
	if err != nil {
		n.close()
		return nil, err
	}
	n.onClose(func() { _ = mb.Close(context.Background()) })
	nd := &mapNode{mb: mb, live: &liveCounter{}, close: n.close}
	if err := nd.mb.RegisterEventHandler(nd.live); err != nil {
		n.close()
		return nil, fmt.Errorf("register handler: %w", err)
	}
	if err := mapSubscribe(nd.mb, channels); err != nil {
		n.close()
		return nil, fmt.Errorf("subscribe: %w", err)
	}
	return nd, nil
}

// mapSubscribe subscribes mb to channels, retrying for up to 10 s as a
// node's clients would: Centrifuge's RedisMapBroker on a cluster can
// refuse right after RegisterEventHandler ("pub/sub connection temporary
// unavailable") while a partition's connection is still coming up.
func mapSubscribe(mb centrifuge.MapBroker, channels []string) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := mb.Subscribe(channels...)
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}
