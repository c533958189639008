package sharded_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/sharded"
)

// Two nodes of one application share four Redis instances: one publishes,
// the other subscribes. Both list the instances in the same order, which
// Fingerprint lets them check.
func Example() {
	addrs := []string{"127.0.0.1:6379", "127.0.0.1:6380", "127.0.0.1:6381", "127.0.0.1:6382"}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	sub, err := sharded.New(sharded.Config{
		Addrs: addrs,
		Options: shardcast.Options{
			Handler: func(m shardcast.Message) {
				fmt.Printf("%s: %s (lag %v)\n", m.Channel, m.Payload, time.Since(m.PublishedAt))
			},
			// Interrupted, Restored and Dropped events name the channels
			// whose clients may have missed messages.
			OnEvent: func(ev shardcast.Event) { log.Println(ev) },
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer sub.Close()

	pub, err := sharded.New(sharded.Config{Addrs: addrs}) // no Handler: publish-only
	if err != nil {
		log.Fatal(err)
	}
	defer pub.Close()
	if pub.Fingerprint() != sub.Fingerprint() {
		log.Fatal("nodes disagree on the instance list")
	}

	// Subscribe returns once Redis confirmed the channels.
	if err := sub.Subscribe(ctx, "room:1", "room:2"); err != nil {
		log.Fatal(err)
	}
	if err := pub.Publish(ctx, "room:1", []byte("hello")); err != nil {
		log.Fatal(err)
	}
}
