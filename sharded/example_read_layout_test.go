package sharded_test

import (
	"context"
	"fmt"
	"log"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/sharded"
)

// An operator's tool shows the instance list a running fleet routes by,
// read from the layout record on the fleet's control instance (its first
// address), whatever list the tool itself was given.
func ExampleReadLayout() {
	addrs := yourRedisInstances()
	agreement := shardcast.Agreement{App: "read-layout-example:"}
	b, err := sharded.New(sharded.Config{Addrs: addrs, Agreement: agreement})
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()

	st, err := sharded.ReadLayout(context.Background(), addrs[0], shardcast.ConnOptions{}, agreement)
	if err != nil {
		log.Fatal(err)
	}
	if st.Record == nil {
		fmt.Println("no layout record: no broker of the application ran")
		return
	}
	fmt.Println("instances:", len(st.Record.Instances), "fingerprint matches:", st.Record.Fingerprint == b.Fingerprint())
	fmt.Println("live brokers:", len(st.Brokers), "re-layout under way:", st.Relayout != nil)
	// Output:
	// instances: 2 fingerprint matches: true
	// live brokers: 1 re-layout under way: false
}
