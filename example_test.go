package shardcast_test

import (
	"errors"
	"fmt"
	"log"

	"github.com/shardcast/shardcast"
)

// A Layout is pure: it maps a channel to its partition, the partition to its
// hash tag, and the channel to the key it travels under on Redis Cluster.
// Every node of an application must use the same partition count and prefix.
func ExampleNewLayout() {
	l, err := shardcast.NewLayout(128, "chat:")
	if err != nil {
		log.Fatal(err)
	}
	p := l.Partition("room:1")
	fmt.Println("partition:", p)
	fmt.Println("tag:", l.Tag(p))
	fmt.Println("key:", l.Key("room:1"))

	// Only the partition counts that have a shipped tag table are valid.
	_, err = shardcast.NewLayout(100, "chat:")
	fmt.Println("100 partitions is invalid:", errors.Is(err, shardcast.ErrInvalidConfig))
	// Output:
	// partition: 114
	// tag: 0x4
	// key: {0x4}.chat:room:1
	// 100 partitions is invalid: true
}

// Channels of one partition share its tag, so Redis hashes their keys to
// one slot and one SSUBSCRIBE can carry them all. Here user:1, user:8 and
// user:9 land in partition 2.
func ExampleLayout_Partition() {
	l, err := shardcast.NewLayout(16, "")
	if err != nil {
		log.Fatal(err)
	}
	for i := range 10 {
		ch := fmt.Sprintf("user:%d", i)
		fmt.Printf("%-7s partition %2d  key %s\n", ch, l.Partition(ch), l.Key(ch))
	}
	// Output:
	// user:0  partition  8  key {7h7}.user:0
	// user:1  partition  2  key {su5}.user:1
	// user:2  partition  0  key {7lw}.user:2
	// user:3  partition 12  key {5jq}.user:3
	// user:4  partition  4  key {nc2}.user:4
	// user:5  partition 10  key {7y5}.user:5
	// user:6  partition 15  key {13v}.user:6
	// user:7  partition  7  key {176}.user:7
	// user:8  partition  2  key {su5}.user:8
	// user:9  partition  2  key {su5}.user:9
}
