package sharded

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/shardcast/shardcast/internal/sentinel"
	"github.com/shardcast/shardcast/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSentinelPassword: Sentinels that refuse clients without a password
// (an ACL user; the default user off) are reached with
// ConnOptions.SentinelUsername and SentinelPassword. Without them New
// fails, naming the Sentinels' refusal; with them, two brokers find the
// master, follow it through a SIGKILL and a failover (the watch and the
// polls log in too), and lose nothing outside a reported window.
func TestSentinelPassword(t *testing.T) {
	t.Parallel()
	g := redistest.StartReplicated(t, 1)
	s := redistest.StartSentinels(t, 3, redistest.SentinelGroup{Name: "a", Servers: g})
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	require.NoError(t, s.RequirePassword(ctx, "shardcast", "s3cret"))

	_, err := New(Config{Addrs: []string{s.URL("a")}, Conn: faultConn})
	require.Error(t, err)
	assert.ErrorContains(t, err, "NOAUTH", "the Sentinels' refusal is named")
	wrong := faultConn
	wrong.SentinelUsername, wrong.SentinelPassword = "shardcast", "wrong"
	_, err = New(Config{Addrs: []string{s.URL("a")}, Conn: wrong})
	assert.ErrorContains(t, err, "WRONGPASS")

	conn := faultConn
	conn.SentinelUsername, conn.SentinelPassword = "shardcast", "s3cret"
	fleet := newFaultFleet(t, 2, Config{Addrs: []string{s.URL("a")}, Conn: conn}, channelNames("spass.", 50))
	followKill(ctx, t, s, fleet, "a")
	fleet.FinishClean(faultTolerance)
}

// TestSentinelTLS: Sentinels that speak TLS only (as their group does)
// are reached with ConnOptions.SentinelTLS, the data nodes with the
// rediss+sentinel:// scheme and Conn.TLS. Without SentinelTLS New fails;
// with it two brokers find the master, follow it through a SIGKILL and a
// failover, and lose nothing outside a reported window.
func TestSentinelTLS(t *testing.T) {
	t.Parallel()
	certs := redistest.NewCerts(t)
	g := redistest.StartReplicated(t, 1, redistest.WithTLS(certs))
	s := redistest.StartSentinels(t, 3, redistest.SentinelGroup{Name: "a", Servers: g})
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	url := s.URL("a")
	require.True(t, strings.HasPrefix(url, "rediss+sentinel://"), url)

	conn := faultConn
	conn.TLS = certs.ClientTLS()
	_, err := New(Config{Addrs: []string{url}, Conn: conn})
	require.ErrorIs(t, err, sentinel.ErrNoAnswer, "plain text to TLS-only Sentinels")

	conn.SentinelTLS = certs.ClientTLS()
	fleet := newFaultFleet(t, 2, Config{Addrs: []string{url}, Conn: conn}, channelNames("stls.", 50))
	followKill(ctx, t, s, fleet, "a")
	fleet.FinishClean(faultTolerance)
}
