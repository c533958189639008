package jump

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/cespare/xxhash/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestJumpHashReferenceVectors checks values published by an independent
// implementation of the paper (ClickHouse's jumpConsistentHash tests), so
// the algorithm itself, not only this code's past output, is pinned.
func TestJumpHashReferenceVectors(t *testing.T) {
	cases := []struct {
		key     uint64
		buckets int
		want    int
	}{
		{1, 1, 0},
		{42, 57, 43},
		{256, 1024, 520},
		{3735883980, 1, 0},
		{3735883980, 666, 361},
		{16045690984833335023, 255, 237},
	}
	for _, c := range cases {
		assert.Equal(t, c.want, Hash(c.key, c.buckets), "Hash(%d, %d)", c.key, c.buckets)
	}
}

// TestJumpHashGolden pins this implementation's output so that any change
// to it, which would re-route channels on a live system, fails.
func TestJumpHashGolden(t *testing.T) {
	cases := []struct {
		key     uint64
		buckets int
		want    int
	}{
		{0x1, 10, 6},
		{0x1, 128, 55},
		{0x1, 1000, 549},
		{0x1, 4096, 2323},
		{0x1, 1048576, 985611},
		{0x2, 128, 62},
		{0x2, 4096, 3927},
		{0xdeadbeef, 2, 1},
		{0xdeadbeef, 3, 2},
		{0xdeadbeef, 10, 5},
		{0xdeadbeef, 128, 87},
		{0xdeadbeef, 1000, 285},
		{0xdeadbeef, 4096, 2238},
		{0x8000000000000000, 128, 107},
		{0x8000000000000000, 4096, 453},
		{0xffffffffffffffff, 3, 2},
		{0xffffffffffffffff, 10, 9},
		{0xffffffffffffffff, 128, 92},
		{0xffffffffffffffff, 1048576, 589430},
	}
	for _, c := range cases {
		assert.Equal(t, c.want, Hash(c.key, c.buckets), "Hash(%#x, %d)", c.key, c.buckets)
	}
}

func TestJumpChannelGolden(t *testing.T) {
	// The xxHash values are the library's; pinning them guards against a
	// silent change of the hash under Channel.
	require.Equal(t, uint64(0xef46db3751d8e999), xxhash.Sum64String(""))
	require.Equal(t, uint64(0xb9f67147ef9c35a3), xxhash.Sum64String("chat:room:1"))
	cases := []struct {
		channel string
		buckets int
		want    int
	}{
		{"a", 3, 1},
		{"a", 16, 8},
		{"a", 128, 17},
		{"a", 4096, 1478},
		{"chat:room:1", 3, 2},
		{"chat:room:1", 16, 8},
		{"chat:room:1", 128, 45},
		{"chat:room:1", 4096, 2656},
		{"user.42", 3, 2},
		{"user.42", 16, 4},
		{"user.42", 128, 35},
		{"user.42", 4096, 2158},
		{"ümlaut", 3, 0},
		{"ümlaut", 16, 13},
		{"ümlaut", 128, 92},
		{"ümlaut", 4096, 3882},
		{"{x}", 16, 12},
		{"{x}", 4096, 2793},
	}
	for _, c := range cases {
		assert.Equal(t, c.want, Channel(c.channel, c.buckets), "Channel(%q, %d)", c.channel, c.buckets)
		assert.Equal(t, Hash(xxhash.Sum64String(c.channel), c.buckets), Channel(c.channel, c.buckets))
	}
}

func TestJumpHashDegenerateBuckets(t *testing.T) {
	for _, n := range []int{math.MinInt, -1, 0, 1} {
		assert.Equal(t, 0, Hash(0xdeadbeef, n), "buckets %d", n)
		assert.Equal(t, 0, Channel("x", n), "buckets %d", n)
	}
	huge := Hash(^uint64(0), math.MaxInt)
	assert.Equal(t, Hash(^uint64(0), math.MaxInt32), huge)
	assert.GreaterOrEqual(t, huge, 0)
}

// TestJumpHashMonotone checks the property the layout relies on: growing
// from n to m buckets either keeps a key's bucket or moves it to a new
// bucket in [n, m).
func TestJumpHashMonotone(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for range 5000 {
		key := rng.Uint64()
		n := 1 + rng.IntN(500)
		m := n + 1 + rng.IntN(500)
		a, b := Hash(key, n), Hash(key, m)
		require.True(t, 0 <= a && a < n, "Hash(%d, %d) = %d", key, n, a)
		require.True(t, b == a || (b >= n && b < m), "key %d moved from %d (n=%d) to %d (m=%d)", key, a, n, b, m)
	}
}

// TestJumpHashUniform is a coarse chi-square style check: with 64000 keys
// over 64 buckets every bucket should hold 1000 ± a wide margin (the
// threshold is ~8 standard deviations, so the test is deterministic and
// still fails for a broken hash that favours some buckets).
func TestJumpHashUniform(t *testing.T) {
	const buckets, keys = 64, 64000
	var counts [buckets]int
	rng := rand.New(rand.NewPCG(7, 8))
	for range keys {
		counts[Hash(rng.Uint64(), buckets)]++
	}
	for b, c := range counts {
		assert.InDelta(t, keys/buckets, c, 250, "bucket %d", b)
	}
}

func TestJumpChannelDoesNotAllocate(t *testing.T) {
	allocs := testing.AllocsPerRun(100, func() { _ = Channel("chat:room:12345", 128) })
	assert.Zero(t, allocs)
}

func BenchmarkJumpChannel(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_ = Channel("chat:room:12345", 128)
	}
}
