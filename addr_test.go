package shardcast_test

import (
	"crypto/tls"
	"fmt"
	"testing"

	"github.com/shardcast/shardcast"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestParseAddr: a host:port takes the options' login, a URL its own;
// what the engines refuse is refused, without echoing a password.
func TestParseAddr(t *testing.T) {
	conf := &tls.Config{ServerName: "cache.internal", MinVersion: tls.VersionTLS12}
	conn := shardcast.ConnOptions{Username: "u", Password: "p", TLS: conf}
	for _, tc := range []struct {
		addr string
		want shardcast.Endpoint
	}{
		{"10.0.0.1:6379", shardcast.Endpoint{Addr: "10.0.0.1:6379", Username: "u", Password: "p", TLS: conf}},
		{"redis://10.0.0.1", shardcast.Endpoint{Addr: "10.0.0.1:6379"}},
		{"redis://app:s3cret@[::1]:7000/2", shardcast.Endpoint{Addr: "[::1]:7000", Username: "app", Password: "s3cret"}},
		{"valkey://:pw@h", shardcast.Endpoint{Addr: "h:6379", Password: "pw"}},
	} {
		got, err := shardcast.ParseAddr(tc.addr, conn)
		require.NoError(t, err, tc.addr)
		assert.Equal(t, tc.want, got, tc.addr)
	}

	got, err := shardcast.ParseAddr("rediss://h:6380", conn)
	require.NoError(t, err)
	require.NotNil(t, got.TLS, "rediss:// is TLS")
	assert.Equal(t, "cache.internal", got.TLS.ServerName, "with the options' settings")
	assert.NotSame(t, conf, got.TLS, "in a copy")
	got, err = shardcast.ParseAddr("rediss://h:6380", shardcast.ConnOptions{})
	require.NoError(t, err)
	assert.NotNil(t, got.TLS, "rediss:// is TLS without ConnOptions.TLS too")

	for _, bad := range []string{"", "h", "redis//h:6379", "h:0", "http://h:1", "redis://h:1?db=2",
		"redis+sentinel://s1:26379/mymaster", "redis://u:hunter2@h:99999"} {
		_, err := shardcast.ParseAddr(bad, conn)
		assert.ErrorIs(t, err, shardcast.ErrInvalidConfig, "%q", bad)
		if err != nil {
			assert.NotContains(t, err.Error(), "hunter2", "%q: the password is not echoed", bad)
		}
	}
}

// TestCheckAddrs: an instance listed twice, however each entry writes
// it, is refused with the list's name; a Sentinel address is taken.
func TestCheckAddrs(t *testing.T) {
	assert.NoError(t, shardcast.CheckAddrs("-shards", []string{"a:1", "b:1", "redis+sentinel://s:26379/m", "localhost:1", "127.0.0.1:1"}))
	assert.NoError(t, shardcast.CheckAddrs("-shards", nil))

	err := shardcast.CheckAddrs("-shards", []string{"a:1", "redis://:hunter2@A:1"})
	require.ErrorIs(t, err, shardcast.ErrInvalidConfig)
	assert.ErrorContains(t, err, "-shards lists the instance A:1 twice (entries 0 and 1")
	assert.NotContains(t, err.Error(), "hunter2")

	err = shardcast.CheckAddrs("Config.Addrs", []string{"[::1]:7000", "[0:0:0:0:0:0:0:1]:7000"})
	assert.ErrorIs(t, err, shardcast.ErrInvalidConfig, "one IP address, two spellings")

	err = shardcast.CheckAddrs("Config.Addrs", []string{"a:1", "redis//b:1"})
	require.ErrorIs(t, err, shardcast.ErrInvalidConfig, "an entry that does not parse")
	assert.ErrorContains(t, err, "a URL is written redis://host:port")
}

// A tool that checks the nodes of a fleet reads its address list with the
// engines' parser, so that each address means what it means to a broker.
func ExampleParseAddr() {
	conn := shardcast.ConnOptions{Username: "ops", Password: "secret"}
	for _, a := range []string{"10.0.0.1:6379", "rediss://app:pw@cache.internal"} {
		e, err := shardcast.ParseAddr(a, conn)
		if err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Printf("%s user %q TLS %v\n", e.Addr, e.Username, e.TLS != nil)
	}
	fmt.Println(shardcast.CheckAddrs("-shards", []string{"10.0.0.1:6379", "redis://10.0.0.1"}))
	// Output:
	// 10.0.0.1:6379 user "ops" TLS false
	// cache.internal:6379 user "app" TLS true
	// shardcast: invalid config: -shards lists the instance 10.0.0.1:6379 twice (entries 0 and 1: "10.0.0.1:6379" and "redis://10.0.0.1"); list each instance once
}
