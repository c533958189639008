// Package taggen builds shardcast's partition tag table and proves it
// balanced.
//
// # What the table must guarantee
//
// A partition is published and subscribed under the key prefix "{tag}.",
// so all its channels live in the Redis Cluster slot CRC16(tag). Redis
// clusters are usually created with `redis-cli --cluster create`, which
// splits the 16384 slots into K contiguous ranges, one per master (see
// Boundaries). For N partitions the table is balanced when, for every K from
// 1 to N, the number of partitions per master differs by at most one
// between any two masters: no master carries more than ceil(N/K)
// partitions. Naive tags such as "0".."127" fail this badly (27 vs 15
// partitions on 6 masters), because CRC16 scatters them at random.
//
// # Construction
//
// Partition slots are placed on a regular grid: the N-partition table uses
// the slots m·(16384/N) + SlotOffset for m in [0, N). In exact arithmetic
// that is balanced for every K: master i starts at slot
// b_i = floor(i·16384/K + 1/2), and the number of grid slots below b_i is
// floor(i·N/K + θ) with θ = 1 − (SlotOffset + 1/2)·N/16384, a Beatty
// sequence whose steps are all floor(N/K) or ceil(N/K). redis-cli computes
// the ranges in float32, which moves some boundaries by up to two slots
// for large K; SlotOffset = 2 sits in the middle of the finest grid cell
// (4 slots wide at N = 4096) and Verify checks by brute force, for every
// table and every K, that the float32 boundaries keep the property.
//
// Every grid of N slots contains the grid of N/2 slots, so the tables are
// nested: the table for N partitions is the first N entries of the table
// for 2N. Position p of the sequence takes the grid cell given by Cell, so
// that the first N positions are exactly the N-slot grid. With jump
// consistent hashing a layout that grows from N to 2N partitions keeps
// every channel that stays in its partition on the very same wire key.
//
// The tag of a slot is the shortest string over Alphabet whose CRC16 slot
// it is, ties broken by byte order (so "0" < "9" < "a" < "z").
//
// Tags are a wire contract: once a table is shipped, partition p's tag may
// never change. Any change to this package that changes the output fails
// the test comparing the committed tags_table.go with Generate.
package taggen

import (
	"bytes"
	"errors"
	"fmt"
	"go/format"
	"math"
	"math/bits"

	"github.com/shardcast/shardcast/internal/crc16"
)

const (
	// SlotCount is the number of Redis Cluster hash slots.
	SlotCount = crc16.SlotCount
	// MinPartitions is the smallest partition count with a shipped table.
	MinPartitions = 16
	// MaxPartitions is the largest partition count with a shipped table and
	// the length of the tag sequence.
	MaxPartitions = 4096
	// SlotOffset is the distance of every partition slot from the start of
	// its grid cell. It must be below SlotCount/MaxPartitions (4).
	SlotOffset = 2
	// Alphabet lists the characters tags are made of, in byte order.
	Alphabet = "0123456789abcdefghijklmnopqrstuvwxyz"
	// MaxTagLen is the longest tag the generator may choose.
	MaxTagLen = 4
)

// ErrUnbalanced is returned by Verify and Generate when a table breaks the
// balance property.
var ErrUnbalanced = errors.New("taggen: tag table is not balanced")

// Entry is one position of the tag sequence.
type Entry struct {
	Tag  string
	Slot uint16
}

// PartitionCounts returns the partition counts with a table: every power of
// two from MinPartitions to MaxPartitions.
func PartitionCounts() []int {
	var counts []int
	for n := MinPartitions; n <= MaxPartitions; n *= 2 {
		counts = append(counts, n)
	}
	return counts
}

// Cell returns the grid cell, in [0, MaxPartitions), of position p of the
// sequence: 0 for p = 0, and for p in [h, 2h) with h a power of two the
// cell (2(p−h)+1)·MaxPartitions/(2h). The first N positions therefore take
// the cells k·MaxPartitions/N for k in [0, N), for every power of two N. It
// returns -1 for p outside [0, MaxPartitions).
func Cell(p int) int {
	if p < 0 || p >= MaxPartitions {
		return -1
	}
	if p == 0 {
		return 0
	}
	h := 1 << (bits.Len(uint(p)) - 1)
	return (2*(p-h) + 1) * (MaxPartitions / (2 * h))
}

// PartitionSlot returns the slot of position p of the sequence, or -1 for p
// outside [0, MaxPartitions).
func PartitionSlot(p int) int {
	c := Cell(p)
	if c < 0 {
		return -1
	}
	return c*(SlotCount/MaxPartitions) + SlotOffset
}

// ShortestTags returns, for each slot in want, the shortest string over
// Alphabet of at most MaxTagLen bytes that hashes to that slot, ties broken
// by byte order. It fails if some wanted slot has no such string.
func ShortestTags(want []int) (map[int]string, error) {
	tags := make(map[int]string, len(want))
	missing := make(map[int]bool, len(want))
	for _, s := range want {
		if s < 0 || s >= SlotCount {
			return nil, fmt.Errorf("taggen: slot %d out of range", s)
		}
		missing[s] = true
	}
	buf := make([]byte, MaxTagLen)
	for n := 1; n <= MaxTagLen && len(missing) > 0; n++ {
		// idx is an odometer over Alphabet; incrementing it from the last
		// digit walks all strings of length n in byte order.
		idx := make([]int, n)
		for {
			for i, d := range idx {
				buf[i] = Alphabet[d]
			}
			// Alphabet has no braces, so the whole tag is hashed.
			s := int(crc16.Checksum(buf[:n]) & (SlotCount - 1))
			if missing[s] {
				tags[s] = string(buf[:n])
				delete(missing, s)
				if len(missing) == 0 {
					break
				}
			}
			i := n - 1
			for i >= 0 && idx[i] == len(Alphabet)-1 {
				idx[i] = 0
				i--
			}
			if i < 0 {
				break
			}
			idx[i]++
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("taggen: %d slots have no tag of at most %d characters", len(missing), MaxTagLen)
	}
	return tags, nil
}

// Sequence returns the MaxPartitions entries of the tag sequence. The table
// for N partitions is its first N entries.
func Sequence() ([]Entry, error) {
	slots := make([]int, MaxPartitions)
	for p := range slots {
		slots[p] = PartitionSlot(p)
	}
	tags, err := ShortestTags(slots)
	if err != nil {
		return nil, err
	}
	seq := make([]Entry, MaxPartitions)
	for p, s := range slots {
		seq[p] = Entry{Tag: tags[s], Slot: uint16(s)}
	}
	return seq, nil
}

// Boundaries returns the first slot of each of masters ranges produced by
// `redis-cli --cluster create` with that many masters, followed by
// SlotCount; master i owns slots [b[i], b[i+1]). masters must be in
// [1, SlotCount]; otherwise Boundaries returns nil.
//
// It reproduces redis-cli's C code operation by operation, in float32 as C
// does with its float variables, including the rounding of lround (half
// away from zero). For fewer than 78 masters the result equals
// floor(i·16384/masters + 1/2); beyond that float32 rounding moves some
// boundaries by a slot or two, and only an exact replica predicts them.
func Boundaries(masters int) []int {
	if masters < 1 || masters > SlotCount {
		return nil
	}
	return AppendBoundaries(make([]int, 0, masters+1), masters)
}

// AppendBoundaries appends Boundaries(masters) to dst and returns the
// extended slice; it returns dst unchanged for masters outside
// [1, SlotCount].
func AppendBoundaries(dst []int, masters int) []int {
	if masters < 1 || masters > SlotCount {
		return dst
	}
	// C: float slots_per_node = CLUSTER_MANAGER_SLOTS / (float) masters;
	perMaster := float32(SlotCount) / float32(masters)
	var cursor float32
	first := 0
	for i := range masters {
		dst = append(dst, first)
		// C: long last = lround(cursor + slots_per_node - 1); both
		// operations are float32 and lround sees the float32 result.
		x := float32(float32(cursor+perMaster) - 1)
		last := int(math.Round(float64(x)))
		if last > SlotCount || i == masters-1 {
			last = SlotCount - 1
		}
		if last < first {
			last = first
		}
		first = last + 1
		cursor = float32(cursor + perMaster)
	}
	return append(dst, SlotCount)
}

// Spread returns the smallest and the largest number of slots of sorted
// (ascending) that fall into one master's range, for the ranges bounds as
// returned by Boundaries.
func Spread(sorted []uint16, bounds []int) (lo, hi int) {
	lo, hi = math.MaxInt, 0
	j := 0
	for i := 0; i+1 < len(bounds); i++ {
		n := 0
		for j < len(sorted) && int(sorted[j]) < bounds[i+1] {
			n++
			j++
		}
		lo, hi = min(lo, n), max(hi, n)
	}
	return lo, hi
}

// TableReport summarises the balance of one table.
type TableReport struct {
	// Partitions is the table's partition count N.
	Partitions int
	// WorstSpread is the largest difference, over every master count K in
	// [1, N], between the most and the least loaded master.
	WorstSpread int
	// WorstMasters is the smallest K reaching WorstSpread.
	WorstMasters int
}

// Verify checks every table of seq (every count of PartitionCounts): tags
// of 1 to MaxTagLen characters of Alphabet, each tag's slot as recorded,
// distinct slots, and a per-master spread of at most one for every master
// count from 1 to N. It returns one report per table and an error wrapping
// ErrUnbalanced for the first table that breaks the balance.
func Verify(seq []Entry) ([]TableReport, error) {
	if len(seq) < MaxPartitions {
		return nil, fmt.Errorf("taggen: sequence has %d entries, want %d", len(seq), MaxPartitions)
	}
	seen := make(map[uint16]int, len(seq))
	for p, e := range seq {
		if err := checkTag(e.Tag); err != nil {
			return nil, fmt.Errorf("taggen: position %d: %w", p, err)
		}
		if s := crc16.Slot(e.Tag); s != e.Slot {
			return nil, fmt.Errorf("taggen: position %d: tag %q has slot %d, table says %d", p, e.Tag, s, e.Slot)
		}
		if q, dup := seen[e.Slot]; dup {
			return nil, fmt.Errorf("taggen: positions %d and %d share slot %d", q, p, e.Slot)
		}
		seen[e.Slot] = p
	}
	var reports []TableReport
	var bounds []int
	for _, n := range PartitionCounts() {
		sorted := sortedSlots(seq[:n])
		r := TableReport{Partitions: n}
		for k := 1; k <= n; k++ {
			bounds = AppendBoundaries(bounds[:0], k)
			lo, hi := Spread(sorted, bounds)
			if hi-lo > r.WorstSpread {
				r.WorstSpread, r.WorstMasters = hi-lo, k
			}
		}
		reports = append(reports, r)
		if r.WorstSpread > 1 {
			return reports, fmt.Errorf("%w: %d partitions on %d masters differ by %d", ErrUnbalanced, n, r.WorstMasters, r.WorstSpread)
		}
	}
	return reports, nil
}

func checkTag(tag string) error {
	if len(tag) < 1 || len(tag) > MaxTagLen {
		return fmt.Errorf("tag %q is not 1 to %d characters long", tag, MaxTagLen)
	}
	for i := 0; i < len(tag); i++ {
		if !(tag[i] >= '0' && tag[i] <= '9' || tag[i] >= 'a' && tag[i] <= 'z') {
			return fmt.Errorf("tag %q has a byte outside [0-9a-z]", tag)
		}
	}
	return nil
}

// sortedSlots returns the slots of entries in ascending order; a counting
// pass over the slot space keeps it linear.
func sortedSlots(entries []Entry) []uint16 {
	var present [SlotCount]bool
	for _, e := range entries {
		present[e.Slot] = true
	}
	sorted := make([]uint16, 0, len(entries))
	for s, ok := range present {
		if ok {
			sorted = append(sorted, uint16(s))
		}
	}
	return sorted
}

// Generate builds the sequence, verifies it and returns the gofmt-ed
// source of tags_table.go for package shardcast, together with the
// verification reports.
func Generate() ([]byte, []TableReport, error) {
	seq, err := Sequence()
	if err != nil {
		return nil, nil, err
	}
	reports, err := Verify(seq)
	if err != nil {
		return nil, reports, err
	}
	var b bytes.Buffer
	b.WriteString("// Code generated by taggen; DO NOT EDIT.\n\n")
	b.WriteString("// The partition tag sequence of package shardcast, built by\n")
	b.WriteString("// internal/taggen (see its package documentation for the construction\n")
	b.WriteString("// and the balance proof). The table for N partitions is the first N\n")
	b.WriteString("// entries. Tags are a wire contract: never edit a shipped entry.\n")
	b.WriteString("//\n")
	b.WriteString("// Worst difference between the partition counts of two masters, over\n")
	b.WriteString("// every master count K from 1 to N, with redis-cli's slot split:\n")
	b.WriteString("//\n")
	for _, r := range reports {
		fmt.Fprintf(&b, "//\tN = %4d: %d\n", r.Partitions, r.WorstSpread)
	}
	b.WriteString("\npackage shardcast\n\n")
	fmt.Fprintf(&b, "// partitionTags[p] is the hash tag of partition p.\n")
	fmt.Fprintf(&b, "var partitionTags = [%d]string{\n", len(seq))
	const perLine = 8
	for p := 0; p < len(seq); p += perLine {
		b.WriteString("\t")
		for q := p; q < p+perLine && q < len(seq); q++ {
			fmt.Fprintf(&b, "%q, ", seq[q].Tag)
		}
		fmt.Fprintf(&b, "// %d\n", p)
	}
	b.WriteString("}\n\n")
	fmt.Fprintf(&b, "// partitionSlots[p] is the Redis Cluster slot of partitionTags[p].\n")
	fmt.Fprintf(&b, "var partitionSlots = [%d]uint16{\n", len(seq))
	for p := 0; p < len(seq); p += perLine {
		b.WriteString("\t")
		for q := p; q < p+perLine && q < len(seq); q++ {
			fmt.Fprintf(&b, "%d, ", seq[q].Slot)
		}
		fmt.Fprintf(&b, "// %d\n", p)
	}
	b.WriteString("}\n")
	src, err := format.Source(b.Bytes())
	if err != nil {
		return nil, reports, fmt.Errorf("taggen: format generated source: %w", err)
	}
	return src, reports, nil
}
