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
		want          []PartitionMove
	}{
		{"no change", Assignment{A, B, C}, Assignment{A, B, C}, nil},
		{"both empty", nil, Assignment{}, nil},
		{"partition moved", Assignment{A, B, C}, Assignment{A, C, C}, []PartitionMove{{1, B, C}}},
		{"master added", Assignment{A, A, B, B}, Assignment{A, C, B, B}, []PartitionMove{{1, A, C}}},
		{"master removed, its partitions unowned", Assignment{A, B, C, C}, Assignment{A, B, "", ""},
			[]PartitionMove{{2, C, ""}, {3, C, ""}}},
		{"replica promoted: every partition of A moves to A'", Assignment{A, B, A, C, A}, Assignment{A2, B, A2, C, A2},
			[]PartitionMove{{0, A, A2}, {2, A, A2}, {4, A, A2}}},
		{"owner restored", Assignment{"", B}, Assignment{A, B}, []PartitionMove{{0, "", A}}},
		{"longer after: extra partitions move from unowned", Assignment{A}, Assignment{A, B, ""},
			[]PartitionMove{{1, "", B}}},
		{"shorter after: extra partitions move to unowned", Assignment{A, B}, Assignment{A},
			[]PartitionMove{{1, B, ""}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, tt.before.Diff(tt.after))
		})
	}
}
