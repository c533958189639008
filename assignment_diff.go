package shardcast

// PartitionMove is one partition whose owner changed. From or To is "" when
// the partition was or became unowned.
type PartitionMove struct {
	// Partition is the partition's index in the Layout.
	Partition int
	// From is the old owner's address, To the new one's.
	From, To string
}

// Diff returns, by partition index, every partition whose owner differs
// between before, the assignment before a topology change, and after. When
// their lengths differ (a Layout change, which the engine should reject
// before it gets here) a partition missing on one side counts as unowned on
// that side, so the extra partitions show up as moves from or to "" rather
// than being silently ignored.
func (before Assignment) Diff(after Assignment) []PartitionMove {
	var moved []PartitionMove
	for p := range max(len(before), len(after)) {
		var from, to string
		if p < len(before) {
			from = before[p]
		}
		if p < len(after) {
			to = after[p]
		}
		if from != to {
			moved = append(moved, PartitionMove{Partition: p, From: from, To: to})
		}
	}
	return moved
}
