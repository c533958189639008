package sharded_test

import (
	"context"
	"fmt"
	"log"
	"strconv"
	"sync/atomic"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/sharded"
)

// A publisher that keeps up to 16 messages in flight from one goroutine
// with PublishAsync, found through the optional shardcast.AsyncPublisher
// interface, with one reusable done func.
func ExampleBroker_PublishAsync() {
	node, err := sharded.New(sharded.Config{Addrs: yourRedisInstances()})
	if err != nil {
		log.Fatal(err)
	}
	defer node.Close()
	var b shardcast.Broker = node
	ap, ok := b.(shardcast.AsyncPublisher)
	if !ok {
		log.Fatal("this engine publishes synchronously only")
	}

	window := make(chan struct{}, 16) // a token per message in flight
	var failed atomic.Int64
	done := func(err error) { // runs on the connection's reader: never block here
		if err != nil {
			failed.Add(1) // a real server would log it, or tell its client
		}
		<-window
	}
	ctx := context.Background()
	for i := range 1000 {
		window <- struct{}{}
		if err := ap.PublishAsync(ctx, "news", []byte(strconv.Itoa(i)), done); err != nil {
			<-window // refused: done will not run
			failed.Add(1)
		}
	}
	for range cap(window) {
		window <- struct{}{} // every outcome is in
	}
	fmt.Println("published:", node.Stats().Published, "failed:", failed.Load())
	// Output: published: 1000 failed: 0
}
