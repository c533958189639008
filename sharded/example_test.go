package sharded_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/sharded"
)

// A node that subscribes and publishes through one broker, and a second,
// publish-only node. A channel lives on the instance its hash picks from
// the address list, so both nodes must list the same instances in the same
// order: Fingerprint lets them check.
func Example() {
	addrs := yourRedisInstances()
	inbox := make(chan shardcast.Message, 2)
	node, err := sharded.New(sharded.Config{
		Addrs: addrs,
		Options: shardcast.Options{
			Handler: func(m shardcast.Message) { inbox <- m },
			OnEvent: func(ev shardcast.Event) { log.Println(ev) }, // losses to tell clients about
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer node.Close()
	other, err := sharded.New(sharded.Config{Addrs: addrs}) // no Handler: publish-only
	if err != nil {
		log.Fatal(err)
	}
	defer other.Close()
	fmt.Println("same instance list:", node.Fingerprint() == other.Fingerprint())

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Subscribe returns once Redis has confirmed the channel.
	if err := node.Subscribe(ctx, "room:1"); err != nil {
		log.Fatal(err)
	}
	for _, b := range []shardcast.Broker{node, other} {
		if err := b.Publish(ctx, "room:1", []byte("hi")); err != nil {
			log.Fatal(err)
		}
	}
	for range 2 {
		select {
		case m := <-inbox:
			fmt.Printf("%s: %s\n", m.Channel, m.Payload)
		case <-ctx.Done():
			fmt.Println("missing:", ctx.Err())
			return
		}
	}
	// Output:
	// same instance list: true
	// room:1: hi
	// room:1: hi
}

// Shard tells which instance of Config.Addrs carries a channel: the same
// answer on every node that lists the same instances in the same order.
func ExampleBroker_Shard() {
	b, err := sharded.New(sharded.Config{Addrs: yourRedisInstances()})
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()
	for _, ch := range []string{"room:1", "room:2", "room:3"} {
		fmt.Println(ch, "lives on instance", b.Shard(ch))
	}
	// Output:
	// room:1 lives on instance 0
	// room:2 lives on instance 0
	// room:3 lives on instance 1
}
