package redisaddr

import (
	"testing"

	"github.com/shardcast/shardcast/internal/badconfig"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDistinct: an instance listed twice is refused, however the two
// entries write it, as long as no DNS is needed to tell.
func TestDistinct(t *testing.T) {
	for _, tc := range []struct {
		addrs []string
		want  string // "" for a list of distinct instances
	}{
		{[]string{"127.0.0.1:6379", "127.0.0.1:6380"}, ""},
		{[]string{"127.0.0.1:6379", "127.0.0.1:6379"}, `entries 0 and 1: "127.0.0.1:6379" and "127.0.0.1:6379"`},
		{[]string{"redis://127.0.0.1:6379", "127.0.0.1:6379"}, "lists the instance 127.0.0.1:6379 twice"},
		{[]string{"a:1", "redis://127.0.0.1", "127.0.0.1:6379"}, "entries 1 and 2"},
		{[]string{"redis://u:pw@h:1/0", "rediss://h:1/3"}, "twice"},
		{[]string{"Cache-0:6379", "cache-0:6379"}, "twice"},
		{[]string{"valkey://CACHE-0", "cache-0:6379"}, "twice"},
		{[]string{"[::1]:6379", "[0:0:0:0:0:0:0:1]:6379"}, "twice"},
		{[]string{"redis://[::ffff:127.0.0.1]:6379", "127.0.0.1:6379"}, "twice"},
		{[]string{"[2001:DB8::1]:7000", "redis://[2001:db8::1]:7000"}, "twice"},
		{[]string{"h:06379", "h:6379"}, "twice"},
		// Only a resolver could equate these: they stay distinct.
		{[]string{"localhost:6379", "127.0.0.1:6379"}, ""},
		{[]string{"h:6379", "h.:6379"}, ""},
		{[]string{"[fe80::1%eth0]:6379", "[fe80::1%eth1]:6379"}, ""},
	} {
		err := Distinct("sharded.Config.Addrs", tc.addrs)
		if tc.want == "" {
			assert.NoError(t, err, "%q", tc.addrs)
			continue
		}
		require.ErrorIs(t, err, badconfig.Err, "%q", tc.addrs)
		assert.ErrorContains(t, err, tc.want, "%q", tc.addrs)
		assert.ErrorContains(t, err, "sharded.Config.Addrs", "the message names the field")
	}

	err := Distinct("cluster.Config.Addrs", []string{"redis://:hunter2@h:1", "h:1"})
	require.ErrorIs(t, err, badconfig.Err)
	assert.NotContains(t, err.Error(), "hunter2", "the password is not echoed")

	err = Distinct("cluster.Config.Addrs", []string{"h:1", "redis//h:1"})
	assert.ErrorIs(t, err, badconfig.Err, "a malformed entry fails as ParseAddr does")
	assert.ErrorContains(t, err, "redis://host:port")
}
