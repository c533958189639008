package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// Expected slots are what CLUSTER KEYSLOT answers on Redis 7.
func TestKeySlotMatchesRedis(t *testing.T) {
	for key, slot := range map[string]int{
		"foo":                  12182,
		"bar":                  5061,
		"{user1000}.following": 3443,
		"{user1000}.followers": 3443,
		"foo{}{bar}":           8363,
		"{0}.x":                13907,
	} {
		assert.Equal(t, slot, keySlot(key), key)
	}
}

func TestTableAlignsColumns(t *testing.T) {
	got := table([]string{"a", "bb"}, [][]string{{"ccc", "d"}})
	assert.Equal(t, "| a   | bb |\n|-----|----|\n| ccc | d  |\n", got)
}
