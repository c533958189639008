package shardcast

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
)

// topoSlotCount is the number of hash slots in a Redis Cluster.
const topoSlotCount = 16384

// SlotRange is an inclusive range of hash slots served by one master.
type SlotRange struct {
	// Start and End are the first and the last slot of the range, both
	// within 0-16383 in a parsed SlotMap.
	Start, End uint16
	// Master is the address ("host:port", as net.JoinHostPort builds it)
	// of the master that owns the range; never empty in a parsed SlotMap.
	Master string
	// MasterID is the master's 40-character node ID, or "" when the reply
	// did not carry one.
	MasterID string
	// Replicas are the addresses of the master's replicas that Redis
	// reported as usable, sorted, without duplicates; nil when there are
	// none.
	Replicas []string
}

// SlotMap tells which master owns which slots; slots in no range are
// unowned. NewSlotMap returns Ranges sorted by Start, disjoint,
// each naming a master, with adjacent ranges of the same master, master ID
// and replicas merged: two maps describing the same ownership are equal
// field by field however Redis split the ranges. MasterOf relies on that
// order; it never panics on a hand-built map, but may answer wrongly for an
// unsorted one.
type SlotMap struct {
	// Ranges are the owned slot ranges.
	Ranges []SlotRange
}

// NewSlotMap validates ranges, in any order, and returns them as a
// normalised SlotMap, as the cluster engine's parser of CLUSTER SLOTS
// does:
// sorted, replicas sorted and de-duplicated, adjacent identical ranges
// merged. It fails for a range past slot 16383, a range whose End is below
// its Start, a range without a master, or two ranges that share a slot;
// cluster.ParseSlots wraps those errors in ErrBadTopology. The input is
// not modified.
func NewSlotMap(ranges []SlotRange) (SlotMap, error) {
	out := make([]SlotRange, 0, len(ranges))
	for _, r := range ranges {
		if err := checkSlotRange(int64(r.Start), int64(r.End)); err != nil {
			return SlotMap{}, err
		}
		if r.Master == "" {
			return SlotMap{}, fmt.Errorf("slots %d-%d have no master address", r.Start, r.End)
		}
		// Copy the replicas so that the map never aliases caller memory.
		reps := slices.Clone(r.Replicas)
		slices.Sort(reps)
		r.Replicas = slices.Compact(reps)
		if len(r.Replicas) == 0 {
			r.Replicas = nil
		}
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b SlotRange) int { return cmp.Compare(a.Start, b.Start) })
	merged := out[:0]
	for _, r := range out {
		if n := len(merged); n > 0 {
			prev := &merged[n-1]
			if r.Start <= prev.End {
				return SlotMap{}, fmt.Errorf("slots %d-%d (%s) overlap slots %d-%d (%s)",
					r.Start, r.End, r.Master, prev.Start, prev.End, prev.Master)
			}
			if r.Start == prev.End+1 && sameOwner(*prev, r) {
				prev.End = r.End
				continue
			}
		}
		merged = append(merged, r)
	}
	if len(merged) == 0 {
		return SlotMap{}, nil
	}
	return SlotMap{Ranges: merged}, nil
}

func sameOwner(a, b SlotRange) bool {
	return a.Master == b.Master && a.MasterID == b.MasterID && slices.Equal(a.Replicas, b.Replicas)
}

func checkSlotRange(start, end int64) error {
	switch {
	case start < 0 || start >= topoSlotCount:
		return fmt.Errorf("slot %d out of range 0-%d", start, topoSlotCount-1)
	case end < 0 || end >= topoSlotCount:
		return fmt.Errorf("slot %d out of range 0-%d", end, topoSlotCount-1)
	case end < start:
		return fmt.Errorf("slot range %d-%d ends before it starts", start, end)
	}
	return nil
}

// MasterOf returns the master that owns slot, and false when the slot is
// unowned or not a valid slot number.
func (m SlotMap) MasterOf(slot uint16) (string, bool) {
	i := sort.Search(len(m.Ranges), func(i int) bool { return m.Ranges[i].End >= slot })
	if i < len(m.Ranges) && m.Ranges[i].Start <= slot && m.Ranges[i].Master != "" {
		return m.Ranges[i].Master, true
	}
	return "", false
}
