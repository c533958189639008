package cluster

import "github.com/shardcast/shardcast"

// partitionMove is one partition whose owner changed. From or To is "" when
// the partition was or became unowned.
type partitionMove struct {
	// Partition is the partition's index in the Layout.
	Partition int
	// From is the old owner's address, To the new one's.
	From, To string
}

// movedPartitions returns, by partition index, every partition whose owner differs
// between before, the assignment before a topology change, and after. When
// their lengths differ (a Layout change, which the engine should reject
// before it gets here) a partition missing on one side counts as unowned on
// that side, so the extra partitions show up as moves from or to "" rather
// than being silently ignored.
func movedPartitions(before, after shardcast.Assignment) []partitionMove {
	var moved []partitionMove
	for p := range max(len(before), len(after)) {
		var from, to string
		if p < len(before) {
			from = before[p]
		}
		if p < len(after) {
			to = after[p]
		}
		if from != to {
			moved = append(moved, partitionMove{Partition: p, From: from, To: to})
		}
	}
	return moved
}
