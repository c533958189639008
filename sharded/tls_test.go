package sharded

import (
	"crypto/tls"
	"crypto/x509"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/redistest"
	"github.com/stretchr/testify/require"
)

// TestTLS: a rediss:// URL, or host:port with Conn.TLS, reaches Redis over
// TLS for both the publishing and the subscribe connections; plain TCP to
// the TLS port, or a server certificate from another CA, fails New; a
// server that wants client certificates takes the broker's and refuses a
// broker without one.
func TestTLS(t *testing.T) {
	certs := redistest.NewCerts(t)
	tlsAddr := startTLSServer(t, certs, "no")
	conn := shardcast.ConnOptions{TLS: &tls.Config{RootCAs: certs.Pool}}
	for name, cfg := range map[string]Config{
		"url":       {Addrs: []string{"rediss://" + tlsAddr}, Conn: conn},
		"host:port": {Addrs: []string{tlsAddr}, Conn: conn},
	} {
		t.Run(name, func(t *testing.T) { roundTrip(t, cfg) })
	}
	t.Run("mutual TLS", func(t *testing.T) {
		mutual := startTLSServer(t, certs, "yes")
		roundTrip(t, Config{Addrs: []string{"rediss://" + mutual}, Conn: shardcast.ConnOptions{TLS: certs.ClientTLS()}})
		b, err := New(Config{Addrs: []string{mutual}, Conn: conn})
		require.Error(t, err, "no client certificate")
		require.Nil(t, b)
	})
	t.Run("wrong CA", func(t *testing.T) {
		other := redistest.NewCerts(t)
		b, err := New(Config{Addrs: []string{tlsAddr}, Conn: shardcast.ConnOptions{TLS: &tls.Config{RootCAs: other.Pool}}})
		require.Error(t, err)
		require.Nil(t, b)
		var unknown x509.UnknownAuthorityError
		require.ErrorAs(t, err, &unknown)
	})
	t.Run("plain to the TLS port", func(t *testing.T) {
		b, err := New(Config{Addrs: []string{tlsAddr}, Conn: shardcast.ConnOptions{DialTimeout: 2 * time.Second}})
		require.Error(t, err)
		require.Nil(t, b)
	})
}

// startTLSServer starts a standalone Redis that speaks only TLS, serving
// certs (clients must present a certificate when authClients is "yes"),
// and returns its address.
func startTLSServer(t *testing.T, certs *redistest.Certs, authClients string) string {
	t.Helper()
	return redistest.StartStandalone(t, redistest.WithTLS(certs), redistest.WithArgs("--tls-auth-clients", authClients)).Addr()
}
