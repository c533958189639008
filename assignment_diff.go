package shardcast

import "slices"

// PartitionMove is one partition whose owner changed. From or To is "" when
// the partition was or became unowned.
type PartitionMove struct {
	// Partition is the partition's index in the Layout.
	Partition int
	// From is the old owner's address, To the new one's.
	From, To string
}

// AssignmentDiff is what changed between two Assignments.
type AssignmentDiff struct {
	// Moved lists every partition whose owner changed, by partition index.
	Moved []PartitionMove
	// AddedMasters own partitions in the new assignment and none in the
	// old one; RemovedMasters the reverse. Both are sorted.
	AddedMasters, RemovedMasters []string
}

// Diff compares before, the assignment before a topology change, with
// after, the one after it, partition by partition. When their lengths differ (a Layout
// change, which the engine should reject before it gets here) a partition
// missing on one side counts as unowned on that side, so the extra
// partitions show up as moves from or to "" rather than being silently
// ignored.
func (before Assignment) Diff(after Assignment) AssignmentDiff {
	var d AssignmentDiff
	for p := range max(len(before), len(after)) {
		var from, to string
		if p < len(before) {
			from = before[p]
		}
		if p < len(after) {
			to = after[p]
		}
		if from != to {
			d.Moved = append(d.Moved, PartitionMove{Partition: p, From: from, To: to})
		}
	}
	oldMasters, newMasters := before.masters(), after.masters()
	for _, m := range newMasters {
		if _, found := slices.BinarySearch(oldMasters, m); !found {
			d.AddedMasters = append(d.AddedMasters, m)
		}
	}
	for _, m := range oldMasters {
		if _, found := slices.BinarySearch(newMasters, m); !found {
			d.RemovedMasters = append(d.RemovedMasters, m)
		}
	}
	return d
}

// Empty reports whether the diff holds no change at all.
func (d AssignmentDiff) Empty() bool {
	return len(d.Moved) == 0 && len(d.AddedMasters) == 0 && len(d.RemovedMasters) == 0
}
