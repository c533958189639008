package shardcast_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/cluster"
	"github.com/shardcast/shardcast/sharded"
)

// echo is application code written against the shardcast.Broker contract:
// it subscribes to channel, publishes text on it through the same broker
// and waits for the message to come back through got, which the broker's
// Handler feeds.
func echo(ctx context.Context, b shardcast.Broker, got <-chan shardcast.Message, channel, text string) (string, error) {
	if err := b.Subscribe(ctx, channel); err != nil {
		return "", err
	}
	if err := b.Publish(ctx, channel, []byte(text)); err != nil {
		return "", err
	}
	select {
	case m := <-got:
		return string(m.Payload), nil
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// Code written against shardcast.Broker runs unchanged on either engine:
// sharded over isolated instances, or cluster over a Redis Cluster. Only
// the constructor knows which one it gets.
func ExampleBroker() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	got := make(chan shardcast.Message, 1)
	opts := shardcast.Options{Handler: func(m shardcast.Message) { got <- m }}

	overInstances, err := sharded.New(sharded.Config{Addrs: yourRedisInstances(), Options: opts})
	if err != nil {
		log.Fatal(err)
	}
	defer overInstances.Close()
	overCluster, err := cluster.New(cluster.Config{Addrs: yourClusterSeeds(), Options: opts})
	if err != nil {
		log.Fatal(err)
	}
	defer overCluster.Close()

	for _, b := range []shardcast.Broker{overInstances, overCluster} {
		reply, err := echo(ctx, b, got, "ping", "pong")
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%T: %s\n", b, reply)
	}
	// Output:
	// *sharded.Broker: pong
	// *cluster.Broker: pong
}
