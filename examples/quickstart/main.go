// Command quickstart subscribes to a channel, publishes to it and prints
// what arrives, over the Redis instances named by REDIS_ADDRS
// (comma-separated, default 127.0.0.1:6379).
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"strings"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/sharded"
)

func main() {
	addrs := []string{"127.0.0.1:6379"}
	if env := os.Getenv("REDIS_ADDRS"); env != "" {
		addrs = strings.Split(env, ",")
	}
	if err := run(addrs); err != nil {
		log.Fatal(err)
	}
}

func run(addrs []string) error {
	received := make(chan shardcast.Message, 1)
	b, err := sharded.New(sharded.Config{
		Addrs: addrs, // one entry per instance; every node lists them in the same order
		Options: shardcast.Options{
			// Called on the broker's workers, in order per channel.
			Handler: func(m shardcast.Message) { received <- m },
		},
	})
	if err != nil {
		return err
	}
	defer b.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := b.Subscribe(ctx, "room:42"); err != nil { // returns once Redis confirmed it
		return err
	}
	if err := b.Publish(ctx, "room:42", []byte("hello")); err != nil {
		return err
	}
	select {
	case m := <-received:
		fmt.Printf("%s: %s\n", m.Channel, m.Payload)
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
