package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/centrifugal/centrifuge"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/shardcast/shardcast/cluster"
	"github.com/shardcast/shardcast/contrib/centrifugebroker"
	"github.com/shardcast/shardcast/sharded"
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

// newMapNode builds one Centrifuge node (not run: its map broker gets a
// liveCounter as its event handler instead of the node) and a map broker
// of the given kind over Redis connections of its own, subscribed to
// channels: centAdapter is contrib/centrifugebroker's MapBroker over a
// Broker of the cluster engine (128 partitions) or the sharded engine
// (standalone); centRedis is Centrifuge's RedisMapBroker over one
// RedisShard, with sharded Pub/Sub over 128 partitions on a cluster, as
// the centrifuge scenario configures its RedisBroker.
func newMapNode(kind string, t presTopo, channels []string) (*mapNode, error) {
	node, err := centrifuge.New(centrifuge.Config{
		LogLevel: centrifuge.LogLevelNone,
		Metrics:  centrifuge.MetricsConfig{RegistererGatherer: prometheus.NewRegistry()},
		Map:      centrifuge.MapConfig{GetMapChannelOptions: mapChannelOptions},
	})
	if err != nil {
		return nil, err
	}
	closers := []func(){func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = node.Shutdown(ctx)
	}}
	closeAll := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	nd := &mapNode{live: &liveCounter{}, close: closeAll}
	switch kind {
	case centAdapter:
		var bc centrifugebroker.Config
		if t.cluster() {
			cc := &cluster.Config{Addrs: t.Addrs, Partitions: centPartitions}
			cc.Options.Workers = cfg.scWorkers
			bc.Cluster = cc
		} else {
			sc := &sharded.Config{Addrs: t.Addrs}
			sc.Options.Workers = cfg.scWorkers
			bc.Sharded = sc
		}
		b, err := centrifugebroker.New(node, bc)
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("centrifugebroker: %w", err)
		}
		closers = append(closers, func() { _ = b.Close(context.Background()) })
		mb, err := centrifugebroker.NewMapBroker(b, centrifugebroker.MapConfig{})
		if err != nil {
			closeAll()
			return nil, err
		}
		closers = append(closers, func() { _ = mb.Close(context.Background()) })
		nd.mb = mb
	case centRedis:
		sc := centrifuge.RedisShardConfig{Address: t.Addrs[0]}
		mc := centrifuge.RedisMapBrokerConfig{}
		if t.cluster() {
			sc = centrifuge.RedisShardConfig{ClusterAddresses: t.Addrs}
			mc.NumShardedPubSubPartitions, mc.UsePrecomputedPartitionTags = centPartitions, true
		}
		shard, err := centrifuge.NewRedisShard(node, sc)
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("centrifuge shard: %w", err)
		}
		closers = append(closers, shard.Close)
		mc.Shards = []*centrifuge.RedisShard{shard}
		mb, err := centrifuge.NewRedisMapBroker(node, mc)
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("centrifuge map broker: %w", err)
		}
		closers = append(closers, func() { _ = mb.Close(context.Background()) })
		nd.mb = mb
	default:
		closeAll()
		return nil, fmt.Errorf("map: unknown broker %q (have %s, %s)", kind, centAdapter, centRedis)
	}
	if err := nd.mb.RegisterEventHandler(nd.live); err != nil {
		closeAll()
		return nil, fmt.Errorf("register handler: %w", err)
	}
	if err := mapSubscribe(nd.mb, channels); err != nil {
		closeAll()
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
