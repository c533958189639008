// Package jump implements the jump consistent hash of Lamping and Veach
// ("A Fast, Minimal Memory, Consistent Hash Algorithm", 2014).
//
// Jump hash maps a 64-bit key to one of n buckets so that keys spread
// evenly and, when n grows to n+1, only about 1/(n+1) of the keys move,
// all of them to the new bucket n. shardcast uses it twice: to pick a
// partition for a channel (cluster engine) and to pick a Redis instance for
// a channel (sharded engine). Both must give the same answer on every node
// forever, so the results are pinned by golden tests.
package jump

import (
	"math"

	"github.com/cespare/xxhash/v2"
)

// Hash returns the bucket of key among buckets buckets, in [0, buckets).
//
// It is the reference algorithm of the paper, bit for bit, so its results
// match other implementations in any language. Hash returns 0 when buckets
// is less than 1. Buckets above math.MaxInt32 are treated as math.MaxInt32,
// the largest count the reference algorithm defines.
func Hash(key uint64, buckets int) int {
	if buckets <= 1 {
		return 0
	}
	n := int64(min(buckets, math.MaxInt32))
	b, j := int64(-1), int64(0)
	for j < n {
		b = j
		key = key*2862933555777941757 + 1
		j = int64(float64(b+1) * (float64(int64(1)<<31) / float64((key>>33)+1)))
	}
	return int(b)
}

// Channel returns the bucket of a channel name: Hash of the channel's
// 64-bit xxHash (XXH64, seed 0). It does not allocate.
func Channel(channel string, buckets int) int {
	return Hash(xxhash.Sum64String(channel), buckets)
}
