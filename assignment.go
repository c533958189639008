package shardcast

import "slices"

// Assignment maps partition index to the address of the master that owns
// the partition's slot; "" marks a partition whose slot has no master.
type Assignment []string

// Assign computes the owner in m of each of partitions partitions, where slotOf
// gives a partition's hash slot (Layout.Slot for a Layout's partitions). A
// nil slotOf or a non-positive count gives an empty Assignment; a slot past
// 16383 counts as unowned.
func (m SlotMap) Assign(slotOf func(partition int) uint16, partitions int) Assignment {
	if slotOf == nil || partitions <= 0 {
		return Assignment{}
	}
	a := make(Assignment, partitions)
	for p := range a {
		a[p], _ = m.MasterOf(slotOf(p))
	}
	return a
}

// PartitionsOf returns, ascending, the partitions master owns; with master
// "" it returns the unowned partitions.
func (a Assignment) PartitionsOf(master string) []int {
	var out []int
	for p, owner := range a {
		if owner == master {
			out = append(out, p)
		}
	}
	return out
}

// Masters returns the distinct masters that own at least one partition,
// sorted.
func (a Assignment) Masters() []string {
	out := make([]string, 0, len(a))
	for _, owner := range a {
		if owner != "" {
			out = append(out, owner)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
