package shardcast

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestAssignmentDiff(t *testing.T) {
	A, A2, B, C := addrA, addrA2, addrB, addrC
	tests := []struct {
		name          string
		before, after Assignment
		want          AssignmentDiff
	}{
		{"no change", Assignment{A, B, C}, Assignment{A, B, C}, AssignmentDiff{}},
		{"both empty", nil, Assignment{}, AssignmentDiff{}},
		{"partition moved", Assignment{A, B, C}, Assignment{A, C, C},
			AssignmentDiff{Moved: []PartitionMove{{1, B, C}}, RemovedMasters: []string{B}}},
		{"master added", Assignment{A, A, B, B}, Assignment{A, C, B, B},
			AssignmentDiff{Moved: []PartitionMove{{1, A, C}}, AddedMasters: []string{C}}},
		{"master removed, its partitions unowned", Assignment{A, B, C, C}, Assignment{A, B, "", ""},
			AssignmentDiff{Moved: []PartitionMove{{2, C, ""}, {3, C, ""}}, RemovedMasters: []string{C}}},
		{"replica promoted: every partition of A moves to A'", Assignment{A, B, A, C, A}, Assignment{A2, B, A2, C, A2},
			AssignmentDiff{Moved: []PartitionMove{{0, A, A2}, {2, A, A2}, {4, A, A2}}, AddedMasters: []string{A2}, RemovedMasters: []string{A}}},
		{"owner restored", Assignment{"", B}, Assignment{A, B},
			AssignmentDiff{Moved: []PartitionMove{{0, "", A}}, AddedMasters: []string{A}}},
		{"longer after: extra partitions move from unowned", Assignment{A}, Assignment{A, B, ""},
			AssignmentDiff{Moved: []PartitionMove{{1, "", B}}, AddedMasters: []string{B}}},
		{"shorter after: extra partitions move to unowned", Assignment{A, B}, Assignment{A},
			AssignmentDiff{Moved: []PartitionMove{{1, B, ""}}, RemovedMasters: []string{B}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.before.Diff(tt.after)
			assert.Equal(t, tt.want, got)
			assert.Equal(t, len(tt.want.Moved) == 0, got.Empty())
		})
	}
}
