package engines

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/centrifugal/centrifuge"
)

// The Centrifuge peer is its RedisBroker used for Pub/Sub only: Publish
// without history, Subscribe/Unsubscribe, and a BrokerEventHandler that
// receives publications. No Node.Run, no clients, no control channel.
func init() {
	register(Kind{Name: "centrifuge", Peer: "github.com/centrifugal/centrifuge v0.40.1", New: func(t Target, _ Tuning, r Recv) (Engine, error) {
		return newCentrifuge(t, r, false, 0, false)
	}})
	register(Kind{Name: "centrifuge-sharded", Cluster: true, Peer: "github.com/centrifugal/centrifuge v0.40.1", New: func(t Target, _ Tuning, r Recv) (Engine, error) {
		return newCentrifuge(t, r, true, 128, false)
	}})
	register(Kind{Name: "centrifuge-sharded-tags", Cluster: true, Peer: "github.com/centrifugal/centrifuge v0.40.1", New: func(t Target, _ Tuning, r Recv) (Engine, error) {
		return newCentrifuge(t, r, true, 128, true)
	}})
}

type centrifugeEngine struct {
	node   *centrifuge.Node
	shard  *centrifuge.RedisShard
	broker *centrifuge.RedisBroker
}

// centrifugeHandler adapts Recv to centrifuge.BrokerEventHandler.
type centrifugeHandler struct{ recv Recv }

func (h centrifugeHandler) HandlePublication(ch string, pub *centrifuge.Publication, _ centrifuge.StreamPosition, _ bool, _ *centrifuge.Publication) error {
	h.recv(ch, pub.Data, Stamped(pub.Data))
	return nil
}
func (centrifugeHandler) HandleJoin(string, *centrifuge.ClientInfo) error  { return nil }
func (centrifugeHandler) HandleLeave(string, *centrifuge.ClientInfo) error { return nil }

func newCentrifuge(t Target, recv Recv, onCluster bool, partitions int, tags bool) (Engine, error) {
	return newCentrifugeWith(t, recv, onCluster, partitions, tags, false, false)
}

// NewCentrifugeCluster is Centrifuge's RedisBroker on the cluster seeds
// with sharded Pub/Sub over partitions partitions. onReplica sets
// RedisShardConfig.ReplicaClientEnabled and
// RedisBrokerConfig.SubscribeOnReplica; publishOnly registers no event
// handler, so the broker opens no Pub/Sub connection (Subscribe then
// fails; Publish works).
func NewCentrifugeCluster(seeds []string, recv Recv, partitions int, onReplica, publishOnly bool) (Engine, error) {
	return newCentrifugeWith(Target{Cluster: seeds}, recv, true, partitions, false, onReplica, publishOnly)
}

func newCentrifugeWith(t Target, recv Recv, onCluster bool, partitions int, tags, onReplica, publishOnly bool) (Engine, error) {
	node, err := centrifuge.New(centrifuge.Config{LogLevel: centrifuge.LogLevelNone})
	if err != nil {
		return nil, err
	}
	var sc centrifuge.RedisShardConfig
	switch {
	case onCluster && len(t.Cluster) > 0:
		sc.ClusterAddresses = t.Cluster
	case !onCluster && len(t.Standalone) == 1:
		sc.Address = t.Standalone[0]
	default:
		return nil, errNoTarget
	}
	sc.ReplicaClientEnabled = onReplica
	shard, err := centrifuge.NewRedisShard(node, sc)
	if err != nil {
		return nil, fmt.Errorf("centrifuge shard: %w", err)
	}
	broker, err := centrifuge.NewRedisBroker(node, centrifuge.RedisBrokerConfig{
		Shards:                      []*centrifuge.RedisShard{shard},
		NumShardedPubSubPartitions:  partitions,
		UsePrecomputedPartitionTags: tags,
		SubscribeOnReplica:          onReplica,
	})
	if err != nil {
		shard.Close()
		return nil, fmt.Errorf("centrifuge broker: %w", err)
	}
	if publishOnly {
		return &centrifugeEngine{node: node, shard: shard, broker: broker}, nil
	}
	if err := broker.RegisterBrokerEventHandler(centrifugeHandler{recv}); err != nil {
		_ = broker.Close(context.Background())
		shard.Close()
		return nil, fmt.Errorf("centrifuge broker: %w", err)
	}
	return &centrifugeEngine{node: node, shard: shard, broker: broker}, nil
}

func (e *centrifugeEngine) Publish(_ context.Context, channel string, payload []byte) error {
	_, err := e.broker.Publish(channel, payload, centrifuge.PublishOptions{})
	return err
}

// Subscribe retries while a partition's PUB/SUB connection is being
// re-established (Centrifuge then answers "temporary unavailable").
func (e *centrifugeEngine) Subscribe(ctx context.Context, channels []string) error {
	for {
		err := e.broker.Subscribe(channels...)
		if err == nil || !strings.Contains(err.Error(), "temporary unavailable") {
			return err
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func (e *centrifugeEngine) Close() error {
	err := e.broker.Close(context.Background())
	e.shard.Close()
	return err
}
