package shardcast

import (
	"bytes"
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardcast/shardcast/internal/crc16"
	"github.com/shardcast/shardcast/internal/taggen"
)

// TestTagTableMatchesGenerator proves the committed tags_table.go is exactly
// what the generator produces, so nobody edited it by hand and the
// generator still reproduces the shipped wire contract.
func TestTagTableMatchesGenerator(t *testing.T) {
	want, _, err := taggen.Generate()
	require.NoError(t, err)
	got, err := os.ReadFile("tags_table.go")
	require.NoError(t, err)
	if !bytes.Equal(want, got) {
		t.Fatalf("tags_table.go differs from the generator's output (%d vs %d bytes); run `go generate` in the module root, and never change the tags of a shipped table", len(got), len(want))
	}
}

// prefixCounts returns c with c[s] = number of slots below s.
func prefixCounts(slots []uint16) []int {
	c := make([]int, crc16.SlotCount+1)
	for _, s := range slots {
		c[s+1]++
	}
	for s := 1; s <= crc16.SlotCount; s++ {
		c[s] += c[s-1]
	}
	return c
}

// TestTagTableBalancedForEveryClusterSize checks the property the tables
// exist for, independently of the generator's own verification: for every
// shipped partition count N and every master count K in [1, N], redis-cli's
// split gives every master floor(N/K) or ceil(N/K) partitions, which means
// a spread of 0 when K divides N and 1 otherwise. It also checks an exact
// (rational) half-up split, so tools that split without float32 rounding
// get balanced clusters too.
func TestTagTableBalancedForEveryClusterSize(t *testing.T) {
	counts := SupportedPartitions()
	prefix := make(map[int][]int, len(counts))
	for _, n := range counts {
		prefix[n] = prefixCounts(partitionSlots[:n])
	}
	worst := make(map[int]int, len(counts))
	exactWorst := make(map[int]int, len(counts))
	var bounds, exact []int
	for k := 1; k <= maxPartitions; k++ {
		bounds = taggen.AppendBoundaries(bounds[:0], k)
		exact = exact[:0]
		for i := range k {
			exact = append(exact, (2*i*crc16.SlotCount+k)/(2*k))
		}
		exact = append(exact, crc16.SlotCount)
		for _, n := range counts {
			if k > n {
				continue
			}
			c := prefix[n]
			spread := func(b []int) int {
				lo, hi := n, 0
				for i := range k {
					m := c[b[i+1]] - c[b[i]]
					lo, hi = min(lo, m), max(hi, m)
				}
				return hi - lo
			}
			want := 1
			if n%k == 0 {
				want = 0
			}
			s := spread(bounds)
			if s != want {
				t.Fatalf("N=%d on %d masters (redis-cli split): spread %d, want %d", n, k, s, want)
			}
			worst[n] = max(worst[n], s)
			e := spread(exact)
			if e != want {
				t.Fatalf("N=%d on %d masters (exact split): spread %d, want %d", n, k, e, want)
			}
			exactWorst[n] = max(exactWorst[n], e)
		}
	}
	for _, n := range counts {
		t.Logf("N=%4d: worst per-master spread over K=1..%d is %d (exact split: %d)", n, n, worst[n], exactWorst[n])
		assert.Equal(t, 1, worst[n], "N=%d", n)
	}
}

// TestTagTableForm checks every tag's shape and slot, and that slots are
// distinct, for the whole sequence (hence for every table).
func TestTagTableForm(t *testing.T) {
	seen := make(map[uint16]int, maxPartitions)
	for p, tag := range partitionTags {
		require.GreaterOrEqual(t, len(tag), 1, "partition %d", p)
		require.LessOrEqual(t, len(tag), maxTagLen, "partition %d", p)
		for i := 0; i < len(tag); i++ {
			c := tag[i]
			require.True(t, c >= '0' && c <= '9' || c >= 'a' && c <= 'z', "partition %d: tag %q", p, tag)
		}
		slot := partitionSlots[p]
		require.Equal(t, crc16.Slot(tag), slot, "partition %d: tag %q", p, tag)
		require.Equal(t, slot, crc16.Slot("{"+tag+"}.x{y}"), "partition %d: tag %q", p, tag)
		q, dup := seen[slot]
		require.False(t, dup, "partitions %d and %d share slot %d", q, p, slot)
		seen[slot] = p
	}
	for _, n := range SupportedPartitions() {
		l, err := NewLayout(n, "")
		require.NoError(t, err)
		for p := range n {
			require.Equal(t, partitionTags[p], l.Tag(p))
			require.Equal(t, crc16.Slot(l.Tag(p)), l.Slot(p))
		}
	}
}

// TestTagTableNestedGrid checks the documented construction: the table for
// N partitions occupies the slots m·16384/N + 2, so each table is the
// prefix of the next.
func TestTagTableNestedGrid(t *testing.T) {
	for _, n := range SupportedPartitions() {
		slots := slices.Clone(partitionSlots[:n])
		slices.Sort(slots)
		for m, s := range slots {
			require.Equal(t, uint16(m*(crc16.SlotCount/n)+taggen.SlotOffset), s, "N=%d, m=%d", n, m)
		}
	}
}

// partitionsPerMaster counts how many of slots fall on each master of a
// cluster created by redis-cli with the given number of masters.
func partitionsPerMaster(slots []uint16, masters int) []int {
	b := taggen.Boundaries(masters)
	per := make([]int, masters)
	for _, s := range slots {
		for i := range masters {
			if int(s) >= b[i] && int(s) < b[i+1] {
				per[i]++
			}
		}
	}
	return per
}

// TestTagTableNaiveTagsAreUnbalanced reproduces the numbers that motivate
// the tables (shared/DESIGN.md) and so also proves the split emulation:
// tags "0".."127" put 27, 15, 22, 23, 16 and 25 partitions on the 6
// masters, and 17 vs 5 on 12 masters, while the shipped 128 table puts 21
// or 22 on each of 6 masters.
func TestTagTableNaiveTagsAreUnbalanced(t *testing.T) {
	naive := make([]uint16, 128)
	for p := range naive {
		naive[p] = crc16.Slot("{" + strconv.Itoa(p) + "}")
	}
	assert.Equal(t, []int{27, 15, 22, 23, 16, 25}, partitionsPerMaster(naive, 6))
	per12 := partitionsPerMaster(naive, 12)
	assert.Equal(t, 17, slices.Max(per12), "%v", per12)
	assert.Equal(t, 5, slices.Min(per12), "%v", per12)

	shipped := partitionsPerMaster(partitionSlots[:128], 6)
	assert.Equal(t, 128, sum(shipped))
	for i, c := range shipped {
		assert.True(t, c == 21 || c == 22, "master %d has %d partitions: %v", i, c, shipped)
	}
	shipped12 := partitionsPerMaster(partitionSlots[:128], 12)
	assert.Equal(t, 11, slices.Max(shipped12), "%v", shipped12)
	assert.Equal(t, 10, slices.Min(shipped12), "%v", shipped12)
}

func sum(xs []int) int {
	s := 0
	for _, x := range xs {
		s += x
	}
	return s
}

// TestTagTableFingerprintCoversTags checks that the fingerprint changes
// when any single ingredient changes, the tag table included.
func TestTagTableFingerprintCoversTags(t *testing.T) {
	tags := slices.Clone(partitionTags[:128])
	base := layoutFingerprint(128, "app.", tags)
	assert.Equal(t, base, layoutFingerprint(128, "app.", slices.Clone(tags)))

	for _, p := range []int{0, 64, 127} {
		changed := slices.Clone(tags)
		changed[p] = "zzzz"
		assert.NotEqual(t, base, layoutFingerprint(128, "app.", changed), "tag %d changed", p)
	}
	swapped := slices.Clone(tags)
	swapped[1], swapped[2] = swapped[2], swapped[1]
	assert.NotEqual(t, base, layoutFingerprint(128, "app.", swapped))
	// Field boundaries matter: moving a byte from the prefix into the
	// first tag must not collide.
	moved := slices.Clone(tags)
	moved[0] = "." + moved[0]
	assert.NotEqual(t, base, layoutFingerprint(128, "app", moved))
	assert.NotEqual(t, base, layoutFingerprint(128, "app.", tags[:127]))
}

// TestTagTableChannelLookup covers the slot-indexed tag lookup behind
// Channel: every tag of the layout is found, tags of larger tables are not.
func TestTagTableChannelLookup(t *testing.T) {
	l, err := NewLayout(64, "")
	require.NoError(t, err)
	for p := range maxPartitions {
		got, ok := l.tagPartition(partitionTags[p])
		if p < 64 {
			require.True(t, ok, "partition %d", p)
			require.Equal(t, p, got)
		} else {
			require.False(t, ok, "partition %d is not in a 64 layout", p)
		}
	}
	for _, tag := range []string{"", "A", "zzzzz", "{", fmt.Sprint(partitionTags[0], "x")} {
		_, ok := l.tagPartition(tag)
		assert.False(t, ok, "tag %q", tag)
	}
}
