package main

import (
	"context"
	"fmt"
	"time"

	"github.com/centrifugal/centrifuge"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/shardcast/shardcast/cluster"
	"github.com/shardcast/shardcast/contrib/centrifugebroker"
	"github.com/shardcast/shardcast/sharded"
)

// callTopo is where a presence or map run's engines keep their entries:
// one standalone Redis, or a 3-master cluster.
type callTopo struct {
	Name    string   // "standalone" or "cluster-3"
	Addrs   []string // the instance, or the cluster's seed nodes
	Servers []string // the masters, in slot order, for CPU and CLIENT LIST
}

func (t callTopo) cluster() bool { return t.Name != "standalone" }

// callTopos are the two topologies the presence and map scenarios run
// on: e's standalone instance and a 3-master cluster.
func callTopos(ctx context.Context, e *env) ([]callTopo, error) {
	sa, err := e.Standalone()
	if err != nil {
		return nil, err
	}
	seeds, _, servers, err := e.clusterMasters(ctx, 3)
	if err != nil {
		return nil, err
	}
	return []callTopo{{Name: "standalone", Addrs: sa[:1], Servers: sa[:1]}, {Name: "cluster-3", Addrs: seeds, Servers: servers}}, nil
}

// engineNode is one Centrifuge node, not run (nothing but the calls of
// the presence or map scenario goes through it), with the Redis
// connections of its own that a presence manager or map broker of one
// engine is built on: for centAdapter a contrib/centrifugebroker Broker
// of the cluster engine (centPartitions partitions) on a cluster, of the
// sharded engine on a standalone instance; for centRedis one Centrifuge
// RedisShard.
type engineNode struct {
	node    *centrifuge.Node
	broker  *centrifugebroker.Broker // centAdapter's
	shard   *centrifuge.RedisShard   // centRedis's
	closers []func()
}

// newEngineNode starts a node with conf (logging off, metrics in a
// registry of its own) and kind's connections on t.
func newEngineNode(kind string, t callTopo, conf centrifuge.Config) (*engineNode, error) {
	conf.LogLevel = centrifuge.LogLevelNone
	conf.Metrics = centrifuge.MetricsConfig{RegistererGatherer: prometheus.NewRegistry()}
	node, err := centrifuge.New(conf)
	if err != nil {
		return nil, err
	}
	n := &engineNode{node: node}
	n.onClose(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = node.Shutdown(ctx)
	})
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
		if n.broker, err = centrifugebroker.New(node, bc); err != nil {
			n.close()
			return nil, fmt.Errorf("centrifugebroker: %w", err)
		}
		n.onClose(func() { _ = n.broker.Close(context.Background()) })
	case centRedis:
		sc := centrifuge.RedisShardConfig{Address: t.Addrs[0]}
		if t.cluster() {
			sc = centrifuge.RedisShardConfig{ClusterAddresses: t.Addrs}
		}
		if n.shard, err = centrifuge.NewRedisShard(node, sc); err != nil {
			n.close()
			return nil, fmt.Errorf("centrifuge shard: %w", err)
		}
		n.onClose(n.shard.Close)
	default:
		n.close()
		return nil, fmt.Errorf("unknown engine %q (have %s, %s)", kind, centAdapter, centRedis)
	}
	return n, nil
}

// onClose adds f to what close undoes.
func (n *engineNode) onClose(f func()) { n.closers = append(n.closers, f) }

// close undoes what the node was built with, last first: the engine
// built on the connections, the connections, the node.
func (n *engineNode) close() {
	for i := len(n.closers) - 1; i >= 0; i-- {
		n.closers[i]()
	}
}
