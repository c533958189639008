package sharded

import (
	"testing"

	"github.com/shardcast/shardcast"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestConfigAddrs: a mistyped URL and an instance listed twice (however
// each entry writes it) are refused by New with ErrInvalidConfig and a
// message that says which entries; distinct instances pass.
func TestConfigAddrs(t *testing.T) {
	for _, tc := range []struct {
		name  string
		addrs []string
		want  string
	}{
		{"missing colon", []string{"redis//127.0.0.1:6379"}, "a URL is written redis://host:port"},
		{"port with a path", []string{"127.0.0.1:6379/0"}, `port "6379/0"`},
		{"same entry", []string{"127.0.0.1:6379", "127.0.0.1:6380", "127.0.0.1:6379"},
			`sharded.Config.Addrs lists the instance 127.0.0.1:6379 twice (entries 0 and 2`},
		{"URL and host:port", []string{"redis://127.0.0.1:6379", "127.0.0.1:6379"}, "twice"},
		{"default port", []string{"redis://127.0.0.1", "127.0.0.1:6379"}, "twice"},
		{"host name case", []string{"Cache-0:6379", "redis://cache-0"}, "twice"},
		{"IPv6 spellings", []string{"[::1]:6379", "redis://[0:0:0:0:0:0:0:1]:6379"}, "twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := New(Config{Addrs: tc.addrs})
			require.ErrorIs(t, err, shardcast.ErrInvalidConfig)
			require.Nil(t, b)
			assert.ErrorContains(t, err, tc.want)
		})
	}
	for _, addrs := range [][]string{
		{"127.0.0.1:6379", "127.0.0.1:6380"},
		{"redis://127.0.0.1:6379", "localhost:6379"}, // only DNS could equate them
	} {
		assert.NoError(t, Config{Addrs: addrs}.validate(), "%q", addrs)
	}
}
