package sharded

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/redistest"
	"github.com/stretchr/testify/require"
)

// TestTLS: a rediss:// URL, or host:port with Conn.TLS, reaches Redis over
// TLS for both the publishing and the subscribe connections; plain TCP to
// the TLS port, or a server certificate from another CA, fails New; a
// server that wants client certificates takes the broker's and refuses a
// broker without one.
func TestTLS(t *testing.T) {
	dir := t.TempDir()
	pool := writeSelfSignedCert(t, dir)
	tlsAddr := startTLSServer(t, dir, "no")
	conn := shardcast.ConnOptions{TLS: &tls.Config{RootCAs: pool}}
	for name, cfg := range map[string]Config{
		"url":       {Addrs: []string{"rediss://" + tlsAddr}, Conn: conn},
		"host:port": {Addrs: []string{tlsAddr}, Conn: conn},
	} {
		t.Run(name, func(t *testing.T) { roundTrip(t, cfg) })
	}
	t.Run("mutual TLS", func(t *testing.T) {
		mutual := startTLSServer(t, dir, "yes")
		cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem"))
		require.NoError(t, err)
		roundTrip(t, Config{Addrs: []string{"rediss://" + mutual},
			Conn: shardcast.ConnOptions{TLS: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}}})
		b, err := New(Config{Addrs: []string{mutual}, Conn: conn})
		require.Error(t, err, "no client certificate")
		require.Nil(t, b)
	})
	t.Run("wrong CA", func(t *testing.T) {
		other := writeSelfSignedCert(t, t.TempDir())
		b, err := New(Config{Addrs: []string{tlsAddr}, Conn: shardcast.ConnOptions{TLS: &tls.Config{RootCAs: other}}})
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

// startTLSServer starts a standalone Redis with a TLS port serving the
// certificate in dir (clients must present one when authClients is "yes")
// and returns the TLS port's address.
func startTLSServer(t *testing.T, dir, authClients string) string {
	t.Helper()
	port := redistest.ReservePort(t)
	redistest.StartStandalone(t, redistest.WithArgs(
		"--tls-port", strconv.Itoa(port),
		"--tls-cert-file", filepath.Join(dir, "cert.pem"),
		"--tls-key-file", filepath.Join(dir, "key.pem"),
		"--tls-ca-cert-file", filepath.Join(dir, "cert.pem"),
		"--tls-auth-clients", authClients,
	))
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

// writeSelfSignedCert writes cert.pem and key.pem for 127.0.0.1 into dir
// and returns a pool that trusts the certificate.
func writeSelfSignedCert(t *testing.T, dir string) *x509.CertPool {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "shardcast test"},
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	keyDER, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "cert.pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "key.pem"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600))
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return pool
}
