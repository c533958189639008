package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/cluster"
)

// Two nodes of one application share a Redis Cluster: one subscribes, the
// other only publishes. Both use the same Partitions and Prefix, which
// decide the wire key, and so the slot, of every channel.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	seeds := yourClusterSeeds()

	got := make(chan shardcast.Message, 1)
	sub, err := cluster.New(cluster.Config{
		Addrs:      seeds,
		Partitions: 128,
		Prefix:     "chat:",
		Options:    shardcast.Options{Handler: func(m shardcast.Message) { got <- m }},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer sub.Close()
	// Subscribe returns once the master owning the channel's slot has
	// confirmed it, so a message published after it returns is delivered.
	if err := sub.Subscribe(ctx, "room:1"); err != nil {
		log.Fatal(err)
	}

	pub, err := cluster.New(cluster.Config{Addrs: seeds, Partitions: 128, Prefix: "chat:"})
	if err != nil {
		log.Fatal(err)
	}
	defer pub.Close()
	if err := pub.Publish(ctx, "room:1", []byte("hello")); err != nil {
		log.Fatal(err)
	}

	select {
	case m := <-got:
		fmt.Printf("%s: %s (publish time known: %v)\n", m.Channel, m.Payload, !m.PublishedAt.IsZero())
	case <-ctx.Done():
		fmt.Println("no message:", ctx.Err())
	}
	// Output:
	// room:1: hello (publish time known: true)
}

// A broker without a Handler is a publisher: it opens no subscribe
// connection, Publish works, and Subscribe says a Handler is needed.
func ExampleNew_publishOnly() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	pub, err := cluster.New(cluster.Config{Addrs: yourClusterSeeds()})
	if err != nil {
		log.Fatal(err)
	}
	defer pub.Close()

	// Nobody listens to "news": Redis drops the message, which is no error.
	fmt.Println("publish:", pub.Publish(ctx, "news", []byte("read all about it")))
	err = pub.Subscribe(ctx, "news")
	fmt.Println("subscribe needs a Handler:", errors.Is(err, shardcast.ErrNoHandler))
	// Output:
	// publish: <nil>
	// subscribe needs a Handler: true
}

// OnEvent is where an application learns which of its channels may have
// missed messages, so that it can tell those channels' clients to recover
// (reload state, fetch history). On a cluster that happens when a master
// fails or a slot moves (EventInterrupted, then EventRestored with the gap)
// and when the handler falls behind (EventDropped). The last is the easy
// one to show: a single worker with a one-message queue, kept busy.
func ExampleNew_onEvent() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	recoverClients := make(chan string, 16) // stands for your clients' recovery
	onEvent := func(ev shardcast.Event) {
		switch ev.Kind {
		case shardcast.EventInterrupted, shardcast.EventDropped:
			for _, ch := range ev.Channels {
				recoverClients <- fmt.Sprintf("%s: recover %s", ev.Kind, ch)
			}
		case shardcast.EventRestored:
			log.Printf("%d channels back after a gap of %v", len(ev.Channels), ev.Until.Sub(ev.Since))
		}
	}

	busy, done := make(chan struct{}, 1), make(chan struct{})
	sub, err := cluster.New(cluster.Config{
		Addrs: yourClusterSeeds(),
		Options: shardcast.Options{
			Workers:   1,
			QueueSize: 1,
			Handler: func(shardcast.Message) {
				busy <- struct{}{}
				<-done // a handler that is slow until the example ends
			},
			OnEvent: onEvent,
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer sub.Close()
	defer close(done) // Close waits for the handler: let it finish first
	if err := sub.Subscribe(ctx, "ticker"); err != nil {
		log.Fatal(err)
	}
	pub, err := cluster.New(cluster.Config{Addrs: yourClusterSeeds()})
	if err != nil {
		log.Fatal(err)
	}
	defer pub.Close()

	publish := func(payload string) {
		if err := pub.Publish(ctx, "ticker", []byte(payload)); err != nil {
			log.Fatal(err)
		}
	}
	publish("1") // keeps the only worker busy
	select {
	case <-busy:
	case <-ctx.Done():
		fmt.Println("no message:", ctx.Err())
		return
	}
	publish("2") // waits in the worker's queue
	publish("3") // finds the queue full
	select {
	case what := <-recoverClients:
		fmt.Println(what)
	case <-ctx.Done():
		fmt.Println("no event:", ctx.Err())
	}
	// Output:
	// dropped: recover ticker
}

// A fleet of many subscriber nodes spreads its subscriptions over each
// shard's replicas, so that the masters do not write every message to
// every node; publishing still goes to the masters.
func ExampleConfig_subscribeOn() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got := make(chan shardcast.Message, 1)
	sub, err := cluster.New(cluster.Config{
		Addrs:       yourClusterSeeds(),
		SubscribeOn: cluster.Replicas, // probes are on by default then
		Options:     shardcast.Options{Handler: func(m shardcast.Message) { got <- m }},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer sub.Close()
	if err := sub.Subscribe(ctx, "feed"); err != nil {
		log.Fatal(err)
	}
	if err := sub.Publish(ctx, "feed", []byte("to every replica subscriber")); err != nil {
		log.Fatal(err)
	}
	select {
	case m := <-got:
		fmt.Printf("%s: %s\n", m.Channel, m.Payload)
	case <-ctx.Done():
		fmt.Println("no message:", ctx.Err())
	}
	// Output:
	// feed: to every replica subscriber
}
