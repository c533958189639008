package cluster_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/cluster"
)

// A running fleet moves from 128 to 1024 partitions without a restart:
// Relayout steps every live broker of the application through the
// phases, and each broker then routes by the new layout.
func ExampleRelayout() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	agreement := shardcast.Agreement{App: "relayout-example:", Heartbeat: 100 * time.Millisecond}
	b, err := cluster.New(cluster.Config{Addrs: yourClusterSeeds(), Partitions: 128, Agreement: agreement})
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()

	rep, err := cluster.Relayout(ctx, cluster.RelayoutConfig{
		Addrs: yourClusterSeeds(), Agreement: agreement, Partitions: 1024,
	})
	if err != nil {
		log.Fatal(err)
	}
	for _, p := range rep.Phases {
		fmt.Println("phase", p.Phase, "acknowledged by", p.Brokers, "broker(s)")
	}
	fmt.Println(rep.From.Description, "->", rep.To.Description)
	fmt.Println("the broker routes by", b.Layout().Partitions(), "partitions")
	// Output:
	// phase prepare acknowledged by 1 broker(s)
	// phase switch acknowledged by 1 broker(s)
	// phase drain acknowledged by 1 broker(s)
	// phase finish acknowledged by 1 broker(s)
	// cluster: 128 partitions, prefix "" -> cluster: 1024 partitions, prefix ""
	// the broker routes by 1024 partitions
}
