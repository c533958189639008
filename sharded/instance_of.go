package sharded

import "github.com/shardcast/shardcast/internal/jump"

// InstanceOf returns the index, in an Addrs list of n instances, of the
// instance every sharded broker publishes and subscribes channel on: the
// jump hash of the channel's xxhash64 (docs/LAYOUT.md). It returns 0 for
// n < 1. Tools and tests use it to find a channel's instance without a
// broker.
func InstanceOf(channel string, n int) int {
	if n < 1 {
		return 0
	}
	return jump.Channel(channel, n)
}
