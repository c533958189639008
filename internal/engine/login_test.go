package engine

import (
	"crypto/tls"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/redisaddr"
)

func TestLoginCarriesEveryDialSetting(t *testing.T) {
	data, sentinels := &tls.Config{ServerName: "data"}, &tls.Config{ServerName: "sentinel"}
	o := shardcast.ConnOptions{Username: "u", Password: "p", TLS: data,
		SentinelUsername: "su", SentinelPassword: "sp", SentinelTLS: sentinels, DialTimeout: 7 * time.Second}
	assert.Equal(t, redisaddr.Login{Username: "u", Password: "p", TLS: data,
		SentinelUsername: "su", SentinelPassword: "sp", SentinelTLS: sentinels, DialTimeout: 7 * time.Second}, Login(o))
}

func TestURLDefaultsKeepsTheRestOfConnOptions(t *testing.T) {
	o := shardcast.ConnOptions{SubscribeConns: 3, DialTimeout: time.Second}
	got := URLDefaults([]string{"rediss://u:pw@h:1", "h2:2"}, o)
	assert.Equal(t, "u", got.Username)
	assert.Equal(t, "pw", got.Password)
	assert.NotNil(t, got.TLS, "rediss:// brings TLS to the plain addresses")
	assert.Equal(t, 3, got.SubscribeConns)
	assert.Equal(t, time.Second, got.DialTimeout)

	own := shardcast.ConnOptions{Password: "mine"}
	assert.Equal(t, own, URLDefaults([]string{"redis://u:pw@h:1"}, own), "options that set credentials are kept")
}
