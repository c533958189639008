package cluster

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/shardcast/shardcast"
)

func TestMovedPartitions(t *testing.T) {
	A, A2, B, C := "127.0.0.1:7001", "127.0.0.1:7004", "127.0.0.1:7002", "127.0.0.1:7003"
	tests := []struct {
		name          string
		before, after shardcast.Assignment
		want          []partitionMove
	}{
		{"no change", shardcast.Assignment{A, B, C}, shardcast.Assignment{A, B, C}, nil},
		{"both empty", nil, shardcast.Assignment{}, nil},
		{"partition moved", shardcast.Assignment{A, B, C}, shardcast.Assignment{A, C, C}, []partitionMove{{1, B, C}}},
		{"master added", shardcast.Assignment{A, A, B, B}, shardcast.Assignment{A, C, B, B}, []partitionMove{{1, A, C}}},
		{"master removed, its partitions unowned", shardcast.Assignment{A, B, C, C}, shardcast.Assignment{A, B, "", ""},
			[]partitionMove{{2, C, ""}, {3, C, ""}}},
		{"replica promoted: every partition of A moves to A'", shardcast.Assignment{A, B, A, C, A}, shardcast.Assignment{A2, B, A2, C, A2},
			[]partitionMove{{0, A, A2}, {2, A, A2}, {4, A, A2}}},
		{"owner restored", shardcast.Assignment{"", B}, shardcast.Assignment{A, B}, []partitionMove{{0, "", A}}},
		{"longer after: extra partitions move from unowned", shardcast.Assignment{A}, shardcast.Assignment{A, B, ""},
			[]partitionMove{{1, "", B}}},
		{"shorter after: extra partitions move to unowned", shardcast.Assignment{A, B}, shardcast.Assignment{A},
			[]partitionMove{{1, B, ""}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, movedPartitions(tt.before, tt.after))
		})
	}
}
