package cluster

import (
	"testing"

	"github.com/shardcast/shardcast"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestConfigAddrs: a mistyped URL and a seed listed twice (however each
// entry writes it) are refused by New with ErrInvalidConfig and a message
// that says which entries; distinct seeds pass.
func TestConfigAddrs(t *testing.T) {
	for _, tc := range []struct {
		name  string
		addrs []string
		want  string
	}{
		{"missing colon", []string{"redis//127.0.0.1:7000"}, "a URL is written redis://host:port"},
		{"port out of range", []string{"127.0.0.1:70000"}, `port "70000"`},
		{"same entry", []string{"127.0.0.1:7000", "127.0.0.1:7000"},
			`cluster.Config.Addrs lists the instance 127.0.0.1:7000 twice (entries 0 and 1`},
		{"URL and host:port", []string{"redis://127.0.0.1:6379", "127.0.0.1:6379"}, "twice"},
		{"URL spellings", []string{"redis://u:pw@node-1:7000/0", "redis://u:pw@NODE-1:7000"}, "twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := New(Config{Addrs: tc.addrs})
			require.ErrorIs(t, err, shardcast.ErrInvalidConfig)
			require.Nil(t, b)
			assert.ErrorContains(t, err, tc.want)
		})
	}
	s, err := Config{Addrs: []string{"127.0.0.1:7000", "redis://127.0.0.1:7001", "localhost:7000"}}.settings()
	require.NoError(t, err)
	assert.Equal(t, []string{"127.0.0.1:7000", "127.0.0.1:7001", "localhost:7000"}, s.seeds)
}
