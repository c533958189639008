package sharded

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardcast/shardcast/redistest"
)

func TestInstanceOfIsTheBrokersShard(t *testing.T) {
	addrs := []string{redistest.StartStandalone(t).Addr(), redistest.StartStandalone(t).Addr(), redistest.StartStandalone(t).Addr()}
	b, err := New(Config{Addrs: addrs})
	require.NoError(t, err)
	defer b.Close()
	seen := map[int]bool{}
	for _, ch := range []string{"a", "b", "news", "chat:42", "", "{x}y", "user:1", "user:2", "user:3"} {
		i := InstanceOf(ch, len(addrs))
		assert.Equal(t, b.Shard(ch), i, ch)
		seen[i] = true
	}
	assert.Len(t, seen, 3, "nine channels spread over every instance")
	assert.Equal(t, 0, InstanceOf("a", 0))
	assert.Equal(t, 0, InstanceOf("a", -1))
}
