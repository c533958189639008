package cluster_test

import (
	"context"
	"fmt"
	"log"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/cluster"
)

// An operator's tool shows the partition count and prefix a running
// fleet routes by, read from the layout record through any node of the
// cluster, whatever its own flags say.
func ExampleReadLayout() {
	agreement := shardcast.Agreement{App: "read-layout-example:"}
	b, err := cluster.New(cluster.Config{Addrs: yourClusterSeeds(), Partitions: 256, Prefix: "chat:", Agreement: agreement})
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()

	st, err := cluster.ReadLayout(context.Background(), yourClusterSeeds(), shardcast.ConnOptions{}, agreement)
	if err != nil {
		log.Fatal(err)
	}
	if st.Record == nil {
		fmt.Println("no layout record: no broker of the application ran")
		return
	}
	fmt.Println(st.Record.Description)
	fmt.Println("live brokers:", len(st.Brokers), "re-layout under way:", st.Relayout != nil)
	// Output:
	// cluster: 256 partitions, prefix "chat:"
	// live brokers: 1 re-layout under way: false
}
