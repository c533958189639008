package redistest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Certs is a self-signed certificate for 127.0.0.1 that is its own CA, and
// its key, written as PEM files. A server started WithTLS serves it and
// trusts it in client certificates; a test's client trusts it and may
// present it.
type Certs struct {
	// CertFile and KeyFile are the PEM files.
	CertFile, KeyFile string
	// Pool trusts the certificate.
	Pool *x509.CertPool
	// Pair is the certificate with its key, for a client that must
	// present one (tls-auth-clients yes).
	Pair tls.Certificate
}

// NewCerts writes fresh Certs into a temporary directory of tb's. It
// fails the test if they cannot be made.
func NewCerts(tb testing.TB) *Certs {
	tb.Helper()
	c, err := WriteCerts(tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// WriteCerts generates a key and a self-signed certificate for 127.0.0.1,
// valid for an hour either side of now, and writes them to dir as
// cert.pem and key.pem.
func WriteCerts(dir string) (*Certs, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("redistest: generate key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "shardcast test"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		// Cluster nodes present it to each other on the bus and to their
		// masters when replicating, so it is a client certificate too.
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("redistest: create certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("redistest: marshal key: %w", err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
	c := &Certs{CertFile: filepath.Join(dir, "cert.pem"), KeyFile: filepath.Join(dir, "key.pem")}
	if err := os.WriteFile(c.CertFile, certPEM, 0o600); err != nil {
		return nil, fmt.Errorf("redistest: %w", err)
	}
	if err := os.WriteFile(c.KeyFile, keyPEM, 0o600); err != nil {
		return nil, fmt.Errorf("redistest: %w", err)
	}
	if c.Pair, err = tls.X509KeyPair(certPEM, keyPEM); err != nil {
		return nil, fmt.Errorf("redistest: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("redistest: %w", err)
	}
	c.Pool = x509.NewCertPool()
	c.Pool.AddCert(cert)
	return c, nil
}

// ClientTLS returns a client configuration that trusts the certificate
// and presents it when the server asks for one.
func (c *Certs) ClientTLS() *tls.Config {
	return &tls.Config{RootCAs: c.Pool, Certificates: []tls.Certificate{c.Pair}}
}

// WithTLS makes servers speak only TLS, with certs: the client port is a
// TLS port (Addr and Port name it; the plain port is off), cluster nodes
// talk to each other on the bus and replicate over TLS and announce their
// TLS ports in CLUSTER SLOTS, and the harness's own connections use TLS.
// Clients need not present a certificate; add
// WithArgs("--tls-auth-clients", "yes") to require one. Servers in Docker
// containers cannot use it.
func WithTLS(certs *Certs) Option {
	return func(o *options) { o.certs = certs }
}

// tlsArgs are the redis-server arguments of WithTLS for a server whose
// TLS port is port.
func tlsArgs(port string, certs *Certs) []string {
	return []string{
		"--port", "0",
		"--tls-port", port,
		"--tls-cert-file", certs.CertFile,
		"--tls-key-file", certs.KeyFile,
		"--tls-ca-cert-file", certs.CertFile,
		"--tls-auth-clients", "no",
		"--tls-cluster", "yes",
		"--tls-replication", "yes",
	}
}
