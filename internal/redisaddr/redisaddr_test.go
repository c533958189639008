package redisaddr

import (
	"crypto/tls"
	"net/url"
	"testing"
	"time"

	"github.com/shardcast/shardcast/internal/badconfig"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseAddr(t *testing.T) {
	conf := &tls.Config{ServerName: "cache.internal"}
	o := Login{Username: "u", Password: "p", TLS: conf, DialTimeout: time.Second}
	noTLS := Login{DialTimeout: time.Second}
	for _, tc := range []struct {
		addr             string
		o                Login
		host, user, pass string
		tls              bool
	}{
		{addr: "127.0.0.1:6379", o: o, host: "127.0.0.1:6379", user: "u", pass: "p", tls: true},
		{addr: "[::1]:7000", o: noTLS, host: "[::1]:7000"},
		{addr: "redis://10.0.0.1", o: o, host: "10.0.0.1:6379"}, // a URL carries its own credentials
		{addr: "redis://app:s3cret@10.0.0.1:7000/3", o: noTLS, host: "10.0.0.1:7000", user: "app", pass: "s3cret"},
		{addr: "redis://:only@h:1", o: noTLS, host: "h:1", pass: "only"},
		{addr: "rediss://h:6380", o: noTLS, host: "h:6380", tls: true},
		{addr: "valkeys://h:6380", o: o, host: "h:6380", tls: true},
		{addr: "valkey://h", o: noTLS, host: "h:6379"},
	} {
		d, err := ParseAddr(tc.addr, tc.o)
		require.NoError(t, err, tc.addr)
		assert.Equal(t, tc.host, d.Addr, tc.addr)
		assert.Equal(t, tc.user, d.Username, tc.addr)
		assert.Equal(t, tc.pass, d.Password, tc.addr)
		assert.Equal(t, tc.tls, d.TLS != nil, tc.addr)
		assert.Equal(t, time.Second, d.Timeout, tc.addr)
	}
	d, err := ParseAddr("rediss://h:1", o)
	require.NoError(t, err)
	assert.Equal(t, "cache.internal", d.TLS.ServerName, "rediss:// takes Conn.TLS's settings")
	assert.NotSame(t, conf, d.TLS, "and does not share the caller's config")

	for _, bad := range []string{"", "localhost", "http://h:1", "unix:///tmp/r.sock", "redis://", "redis://[::1", "redis://:pw@",
		"redis://h:1?timeout=5s", "redis://h:1?", "redis://h:1#f", "rediss://u:pw@h:1/0?protocol=3"} {
		_, err := ParseAddr(bad, o)
		assert.ErrorIs(t, err, badconfig.Err, "%q", bad)
	}
	_, err = ParseAddr("ftp://user:hunter2@h:1", o)
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "hunter2", "the password is not echoed")
	_, err = ParseAddr("redis://user:hunter2@h:99999", o)
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "hunter2", "nor in a port error")
}

// TestURLDefaults: plain host:port addresses take the credentials and TLS
// of the URLs beside them when those agree and the options set none.
func TestURLDefaults(t *testing.T) {
	o := Login{DialTimeout: time.Second}
	got := URLDefaults([]string{"redis://u:pw@a:1", "b:2", "redis://u:pw@c:3"}, o)
	assert.Equal(t, "u", got.Username)
	assert.Equal(t, "pw", got.Password)
	assert.Nil(t, got.TLS)
	assert.Equal(t, time.Second, got.DialTimeout, "the rest is o's")
	assert.NotNil(t, URLDefaults([]string{"rediss://:pw@a:1"}, o).TLS, "rediss:// brings TLS")
	for name, addrs := range map[string][]string{
		"no URL":        {"a:1", "b:2"},
		"disagree":      {"redis://:pw@a:1", "redis://:other@b:2"},
		"TLS disagrees": {"redis://:pw@a:1", "rediss://:pw@b:2"},
	} {
		assert.Equal(t, o, URLDefaults(addrs, o), name)
	}
	own := Login{Password: "mine"}
	assert.Equal(t, own, URLDefaults([]string{"redis://:pw@a:1"}, own), "options that set credentials win")
}

// TestParseAddrMalformed: a host:port whose host could not be a name or an
// IP address, or whose port is not 1 to 65535, is refused, most often a
// URL with its colon missing, which net.SplitHostPort alone would take
// for the host "redis//127.0.0.1".
func TestParseAddrMalformed(t *testing.T) {
	for _, tc := range []struct{ addr, want string }{
		{"redis//127.0.0.1:6379", `host "redis//127.0.0.1" holds '/', which no host name or IP address does; a URL is written redis://host:port`},
		{`redis:\\127.0.0.1:6379`, `is not host:port or a redis:// URL`},
		{`redis\\127.0.0.1:6379`, `holds '\\'`},
		{"rediss//h:6380", "a URL is written redis://host:port"},
		{"user@h:6379", `holds '@'`},
		{"h?db=1:6379", `holds '?'`},
		{"h#x:6379", `holds '#'`},
		{" h:6379", `holds ' '`},
		{"h\tx:6379", `holds '\t'`},
		{"127.0.0.1:6379/0", `port "6379/0" is not a number from 1 to 65535`},
		{"h:redis", `port "redis"`},
		{"h:0", `port "0"`},
		{"h:65536", `port "65536"`},
		{"h:+1", `port "+1"`},
		{"h:-1", `port "-1"`},
		{"redis://h:0", `port "0"`},
		{"redis://h:70000", `port "70000"`},
	} {
		_, err := ParseAddr(tc.addr, Login{})
		require.ErrorIs(t, err, badconfig.Err, "%q", tc.addr)
		assert.ErrorContains(t, err, tc.want, "%q", tc.addr)
	}
	// The edges that stay valid: the spec's vectors accept an empty host
	// or port, an IPv6 zone holds '%', and a name may hold '_'.
	for _, ok := range []string{"h:1", "h:65535", "[fe80::1%eth0]:6379", "redis_1:6379", ":6379", "h:", "redis://h:65535"} {
		_, err := ParseAddr(ok, Login{})
		assert.NoError(t, err, "%q", ok)
	}
}

func TestParseSentinel(t *testing.T) {
	tg, err := Parse("redis+sentinel://u:p%40w@10.0.0.1,10.0.0.2:26380,[::1]/mymaster", Login{DialTimeout: time.Second})
	require.NoError(t, err)
	assert.Equal(t, "sentinel/mymaster", tg.ID)
	assert.Equal(t, "mymaster", tg.Master)
	assert.Equal(t, []string{"10.0.0.1:26379", "10.0.0.2:26380", "[::1]:26379"}, tg.Sentinels)
	assert.Equal(t, "u", tg.Dialer.Username)
	assert.Equal(t, "p@w", tg.Dialer.Password)
	assert.Nil(t, tg.Dialer.TLS)
	assert.Equal(t, time.Second, tg.Dialer.Timeout)
	assert.Empty(t, tg.Dialer.Addr)

	tg, err = Parse("rediss+sentinel://h:1/m", Login{})
	require.NoError(t, err)
	assert.NotNil(t, tg.Dialer.TLS, "TLS to the data nodes")

	tg, err = Parse("127.0.0.1:6379", Login{})
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1:6379", tg.ID)
	assert.Empty(t, tg.Sentinels)

	_, err = ParseAddr("redis+sentinel://h:1/m", Login{})
	assert.ErrorIs(t, err, badconfig.Err, "a node address cannot be a Sentinel master")
	assert.ErrorIs(t, Distinct("x", []string{"redis+sentinel://h:1/m", "redis+sentinel://g:2/m"}), badconfig.Err)
	assert.NoError(t, Distinct("x", []string{"redis+sentinel://h:1/m", "redis+sentinel://h:1/n"}))
}

// TestSentinelURL: the URL SentinelURL writes parses back to its shard,
// Sentinels, TLS and credentials (escaped where they need it).
func TestSentinelURL(t *testing.T) {
	sentinels := []string{"10.0.0.1:26379", "[::1]:26380"}
	for _, c := range []struct {
		name string
		tls  bool
		user *url.Userinfo
	}{
		{"plain", false, nil},
		{"tls", true, nil},
		{"password", false, url.UserPassword("", "p@w:/")},
		{"user and password, tls", true, url.UserPassword("u", "p")},
	} {
		t.Run(c.name, func(t *testing.T) {
			tg, err := Parse(SentinelURL("sentinel/m", sentinels, c.tls, c.user), Login{})
			require.NoError(t, err)
			assert.Equal(t, "sentinel/m", tg.ID)
			assert.Equal(t, sentinels, tg.Sentinels)
			assert.Equal(t, c.tls, tg.Dialer.TLS != nil)
			var user, pass string
			if c.user != nil {
				user = c.user.Username()
				pass, _ = c.user.Password()
			}
			assert.Equal(t, user, tg.Dialer.Username)
			assert.Equal(t, pass, tg.Dialer.Password)
		})
	}
}
