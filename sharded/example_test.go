package sharded_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/sharded"
)

// Two nodes of one application share the same Redis instances: one
// subscribes, the other only publishes. Both list the instances in the same
// order, because a channel lives on the instance its hash picks from that
// list.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	addrs := yourRedisInstances()

	got := make(chan shardcast.Message, 1)
	sub, err := sharded.New(sharded.Config{
		Addrs:   addrs,
		Options: shardcast.Options{Handler: func(m shardcast.Message) { got <- m }},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer sub.Close()
	// Subscribe returns once Redis has confirmed the channel, so a message
	// published after it returns is delivered.
	if err := sub.Subscribe(ctx, "room:1"); err != nil {
		log.Fatal(err)
	}

	pub, err := sharded.New(sharded.Config{Addrs: addrs})
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

// A broker without a Handler is a publisher: Publish works, Subscribe says
// a Handler is needed. Many nodes of an application only publish.
func ExampleNew_publishOnly() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	pub, err := sharded.New(sharded.Config{Addrs: yourRedisInstances()})
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

// OnEvent hears of every loss the broker knows about. Here the handler is
// slower than the publisher: with one worker whose queue holds one message,
// a third message arriving while the first is still being handled is
// dropped, and an EventDropped names its channel so that the application
// can tell that channel's clients to recover.
func ExampleNew_onEvent() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	handling := make(chan string, 3)
	proceed := make(chan struct{}, 1) // the slow handler waits for a token
	events := make(chan shardcast.Event, 16)
	sub, err := sharded.New(sharded.Config{
		Addrs: yourRedisInstances(),
		Options: shardcast.Options{
			Workers:   1,
			QueueSize: 1,
			Handler: func(m shardcast.Message) {
				handling <- string(m.Payload)
				<-proceed
			},
			OnEvent: func(ev shardcast.Event) { events <- ev },
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer sub.Close()
	defer close(proceed) // Close waits for the handler: let it finish first
	if err := sub.Subscribe(ctx, "orders"); err != nil {
		log.Fatal(err)
	}
	pub, err := sharded.New(sharded.Config{Addrs: yourRedisInstances()})
	if err != nil {
		log.Fatal(err)
	}
	defer pub.Close()
	publish := func(payload string) {
		if err := pub.Publish(ctx, "orders", []byte(payload)); err != nil {
			log.Fatal(err)
		}
	}

	publish("1")
	select {
	case p := <-handling: // the only worker is busy from here on
		fmt.Println("handling", p)
	case <-ctx.Done():
		fmt.Println("no message:", ctx.Err())
		return
	}
	publish("2") // waits in the worker's queue
	publish("3") // finds the queue full
	for dropped := false; !dropped; {
		select {
		case ev := <-events:
			if ev.Kind == shardcast.EventDropped {
				fmt.Printf("%s: %d message(s) on %v\n", ev.Kind, ev.Count, ev.Channels)
				dropped = true
			}
		case <-ctx.Done():
			fmt.Println("no event:", ctx.Err())
			return
		}
	}
	proceed <- struct{}{}
	select {
	case p := <-handling:
		fmt.Println("handling", p)
	case <-ctx.Done():
		fmt.Println("no message:", ctx.Err())
	}
	// Output:
	// handling 1
	// dropped: 1 message(s) on [orders]
	// handling 2
}
