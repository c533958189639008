package taggen

import (
	"errors"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardcast/shardcast/internal/crc16"
)

// TestTagGenBoundariesSixMasters checks the split against the ranges a real
// `redis-cli --cluster create` printed for 6 masters (shared/REDIS_FACTS.md).
func TestTagGenBoundariesSixMasters(t *testing.T) {
	assert.Equal(t, []int{0, 2731, 5461, 8192, 10923, 13653, 16384}, Boundaries(6))
	assert.Equal(t, []int{0, 5461, 10923, 16384}, Boundaries(3))
	assert.Equal(t, []int{0, 16384}, Boundaries(1))
	assert.Nil(t, Boundaries(0))
	assert.Nil(t, Boundaries(-3))
	assert.Nil(t, Boundaries(SlotCount+1))
}

// TestTagGenBoundariesFloat32 pins where float32 matters: below 78 masters
// redis-cli's split equals exact rounding of i·16384/K, at 78 it does not
// (REDIS_FACTS.md). A float64 or exact emulation fails the second half.
func TestTagGenBoundariesFloat32(t *testing.T) {
	exact := func(k int) []int {
		b := make([]int, 0, k+1)
		for i := range k {
			b = append(b, (2*i*SlotCount+k)/(2*k)) // floor(i·S/k + 1/2)
		}
		return append(b, SlotCount)
	}
	for k := 1; k < 78; k++ {
		require.Equal(t, exact(k), Boundaries(k), "%d masters", k)
	}
	b78, e78 := Boundaries(78), exact(78)
	assert.NotEqual(t, e78, b78)
	var diffs []int
	for i := range b78 {
		if b78[i] != e78[i] {
			diffs = append(diffs, i)
		}
	}
	assert.Len(t, diffs, 1, "boundaries that differ at 78 masters: %v", diffs)
}

func TestTagGenBoundariesCoverAllSlots(t *testing.T) {
	for _, k := range []int{1, 2, 3, 7, 78, 130, 1000, 4096, 16384} {
		b := Boundaries(k)
		require.Len(t, b, k+1)
		assert.Equal(t, 0, b[0])
		assert.Equal(t, SlotCount, b[k])
		for i := range k {
			require.Less(t, b[i], b[i+1], "%d masters: master %d empty", k, i)
		}
	}
}

func TestTagGenCellIsNested(t *testing.T) {
	for n := 1; n <= MaxPartitions; n *= 2 {
		cells := make([]int, n)
		for p := range n {
			cells[p] = Cell(p)
		}
		slices.Sort(cells)
		for m, c := range cells {
			require.Equal(t, m*(MaxPartitions/n), c, "first %d positions", n)
		}
	}
	assert.Equal(t, -1, Cell(-1))
	assert.Equal(t, -1, Cell(MaxPartitions))
	assert.Equal(t, -1, PartitionSlot(MaxPartitions))
	assert.Equal(t, SlotOffset, PartitionSlot(0))
	assert.Equal(t, SlotCount/2+SlotOffset, PartitionSlot(1))
}

// TestTagGenShortestTags re-derives the tag of every used slot by a
// separate enumeration (strings as base-36 numbers) and checks that the
// generator picked the shortest, then smallest, string.
func TestTagGenShortestTags(t *testing.T) {
	seq, err := Sequence()
	require.NoError(t, err)
	want := make(map[uint16]bool, len(seq))
	for _, e := range seq {
		want[e.Slot] = true
	}
	first := make(map[uint16]string, len(seq))
	buf := make([]byte, MaxTagLen)
	for n := 1; n <= MaxTagLen && len(first) < len(want); n++ {
		total := 1
		for range n {
			total *= len(Alphabet)
		}
		for v := range total {
			x := v
			for i := n - 1; i >= 0; i-- {
				buf[i] = Alphabet[x%len(Alphabet)]
				x /= len(Alphabet)
			}
			s := crc16.Slot(string(buf[:n]))
			if want[s] {
				if _, ok := first[s]; !ok {
					first[s] = string(buf[:n])
				}
			}
		}
	}
	for p, e := range seq {
		require.Equal(t, first[e.Slot], e.Tag, "position %d, slot %d", p, e.Slot)
	}
}

func TestTagGenVerifyRejectsBadTables(t *testing.T) {
	seq, err := Sequence()
	require.NoError(t, err)
	reports, err := Verify(seq)
	require.NoError(t, err)
	require.Len(t, reports, len(PartitionCounts()))
	for _, r := range reports {
		assert.Equal(t, 1, r.WorstSpread, "N=%d", r.Partitions)
	}

	// Swapping two positions keeps every tag valid but moves a slot of the
	// 16-table into the 4096-only part: the 16-table becomes unbalanced.
	bad := slices.Clone(seq)
	bad[1], bad[MaxPartitions-1] = bad[MaxPartitions-1], bad[1]
	_, err = Verify(bad)
	require.ErrorIs(t, err, ErrUnbalanced)

	bad = slices.Clone(seq)
	bad[5].Tag = "ABC"
	_, err = Verify(bad)
	require.Error(t, err)
	assert.False(t, errors.Is(err, ErrUnbalanced))

	bad = slices.Clone(seq)
	bad[7].Slot++
	_, err = Verify(bad)
	require.ErrorContains(t, err, "has slot")

	bad = slices.Clone(seq)
	bad[9] = bad[3]
	_, err = Verify(bad)
	require.ErrorContains(t, err, "share slot")

	_, err = Verify(seq[:100])
	require.Error(t, err)
}

func TestTagGenSpread(t *testing.T) {
	bounds := []int{0, 10, 20, 30}
	lo, hi := Spread([]uint16{1, 2, 3, 11, 25}, bounds)
	assert.Equal(t, 1, lo)
	assert.Equal(t, 3, hi)
	lo, hi = Spread([]uint16{5, 15, 25}, bounds)
	assert.Equal(t, 1, lo)
	assert.Equal(t, 1, hi)
}

func TestTagGenShortestTagsErrors(t *testing.T) {
	_, err := ShortestTags([]int{SlotCount})
	require.Error(t, err)
	tags, err := ShortestTags([]int{int(crc16.Slot("a")), int(crc16.Slot("zz"))})
	require.NoError(t, err)
	assert.Equal(t, "a", tags[int(crc16.Slot("a"))])
	assert.LessOrEqual(t, len(tags[int(crc16.Slot("zz"))]), 2)
}
