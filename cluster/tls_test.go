package cluster

import (
	"crypto/tls"
	"crypto/x509"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestTLS runs the broker against a cluster whose nodes speak only TLS
// (client ports, cluster bus and replication) and want client
// certificates. Seeded with one replica, the broker discovers the masters
// by the TLS ports CLUSTER SLOTS announces; its subscribe connections, its
// publishing connections (which also carry the slot-map polls) and the
// one-off seed connections all reach them over TLS.
// A broker without a client certificate, with a server certificate from
// another CA, or without TLS at all fails New with the cause.
func TestTLS(t *testing.T) {
	certs := redistest.NewCerts(t)
	c := redistest.StartCluster(t, 2, 1, redistest.WithTLS(certs), redistest.WithArgs("--tls-auth-clients", "yes"))
	ctx := testCtx(t, time.Minute)
	masters, err := c.Masters(ctx)
	require.NoError(t, err)
	var masterAddrs []string
	for _, m := range masters {
		masterAddrs = append(masterAddrs, m.Addr())
	}
	slices.Sort(masterAddrs)
	replicas, err := c.Replicas(ctx)
	require.NoError(t, err)
	require.NotEmpty(t, replicas)
	seed := replicas[0].Addr()

	for name, addr := range map[string]string{"host:port": seed, "url": "rediss://" + seed} {
		t.Run(name, func(t *testing.T) {
			rec := newRecorder()
			b := newBroker(t, Config{Addrs: []string{addr}, Conn: shardcast.ConnOptions{TLS: certs.ClientTLS()},
				Options: shardcast.Options{Handler: rec.handle}})
			assert.Equal(t, masterAddrs, slices.Sorted(maps.Keys(b.Masters())), "masters by their TLS ports")
			channels := channelsPerPartition(b.Layout(), 1, "tls."+name+".")
			require.NoError(t, b.Subscribe(ctx, channels...))
			mark := time.Now()
			publishAll(t, b, channels, "1")
			rec.waitSilentSince(t, channels, mark, 20*time.Second)
			// Every publish went out on the masters' TLS connections.
			var published uint64
			for _, n := range b.NodeStats() {
				published += n.Published
			}
			assert.EqualValues(t, len(channels), published)
		})
	}
	t.Run("no client certificate", func(t *testing.T) {
		b, err := New(Config{Addrs: []string{seed}, Conn: shardcast.ConnOptions{TLS: &tls.Config{RootCAs: certs.Pool}}})
		require.Error(t, err)
		require.Nil(t, b)
		t.Logf("without a client certificate: %v", err)
	})
	t.Run("wrong CA", func(t *testing.T) {
		other := redistest.NewCerts(t)
		b, err := New(Config{Addrs: []string{seed}, Conn: shardcast.ConnOptions{TLS: &tls.Config{RootCAs: other.Pool}}})
		require.Error(t, err)
		require.Nil(t, b)
		var unknown x509.UnknownAuthorityError
		require.ErrorAs(t, err, &unknown)
		t.Logf("with another CA: %v", err)
	})
	t.Run("plain to the TLS ports", func(t *testing.T) {
		b, err := New(Config{Addrs: []string{seed}, Conn: shardcast.ConnOptions{DialTimeout: 2 * time.Second}})
		require.Error(t, err)
		require.Nil(t, b)
	})
}
