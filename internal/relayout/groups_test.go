package relayout

import (
	"testing"

	"github.com/shardcast/shardcast"
	"github.com/stretchr/testify/assert"
)

// TestTwinGroups: a moving channel is grouped on both its paths, one that
// stays on its current path only, in the order paths were first met.
func TestTwinGroups(t *testing.T) {
	paths := map[string][2]int{"a": {1, -1}, "b": {1, 2}, "c": {3, 1}, "d": {2, -1}}
	got := TwinGroups([]string{"a", "b", "c", "d"}, func(ch string) (int, int) { return paths[ch][0], paths[ch][1] })
	assert.Equal(t, []shardcast.Group{
		{Key: 1, Channels: []string{"a", "b", "c"}},
		{Key: 2, Channels: []string{"b", "d"}},
		{Key: 3, Channels: []string{"c"}},
	}, got)
	assert.Empty(t, TwinGroups(nil, nil))
}
