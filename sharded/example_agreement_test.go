package sharded_test

import (
	"errors"
	"fmt"
	"log"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/sharded"
)

// A node configured with one instance fewer than the running node would
// put some channels on the wrong instance. The layout record the running
// node keeps on the first instance makes New refuse it instead.
func ExampleNew_layoutMismatch() {
	addrs := yourRedisInstances()
	running, err := sharded.New(sharded.Config{Addrs: addrs, Agreement: shardcast.Agreement{App: "example:"}})
	if err != nil {
		log.Fatal(err)
	}
	defer running.Close()

	_, err = sharded.New(sharded.Config{Addrs: addrs[:1], Agreement: shardcast.Agreement{App: "example:"}})
	fmt.Println("refused:", errors.Is(err, shardcast.ErrLayoutMismatch))
	var mm *shardcast.LayoutMismatchError
	if errors.As(err, &mm) {
		fmt.Println("recorded instances:", len(mm.Recorded.Instances), "ours:", len(mm.Ours.Instances))
	}
	// Output:
	// refused: true
	// recorded instances: 2 ours: 1
}
