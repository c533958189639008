package redistest

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestTLSCluster: with WithTLS every node listens only on its TLS port,
// the nodes form the cluster and replicate over TLS, and CLUSTER SLOTS, on
// every node, names each master and replica by its TLS port. With
// tls-auth-clients yes a client without a certificate is refused.
func TestTLSCluster(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	certs := NewCerts(t)
	c := StartCluster(t, 2, 1, WithTLS(certs), WithArgs("--tls-auth-clients", "yes"))
	ports := make(map[int64]bool)
	for _, n := range c.Nodes() {
		ports[int64(n.Port())] = true
	}
	for _, n := range c.Nodes() {
		port, err := n.Do(ctx, "CONFIG", "GET", "port")
		require.NoError(t, err)
		assert.Equal(t, []any{"port", "0"}, port, "%s: the plain port is off", n.Addr())
		reply, err := n.Do(ctx, "CLUSTER", "SLOTS")
		require.NoError(t, err)
		ranges, ok := reply.([]any)
		require.True(t, ok)
		require.Len(t, ranges, 2)
		for _, r := range ranges {
			entry := r.([]any)
			require.Len(t, entry, 4, "CLUSTER SLOTS on %s: a master and its replica per range", n.Addr())
			for _, node := range entry[2:] {
				port := node.([]any)[1].(int64)
				assert.True(t, ports[port], "CLUSTER SLOTS on %s names port %d, not a node's TLS port", n.Addr(), port)
			}
		}
	}
	replicas, err := c.Replicas(ctx)
	require.NoError(t, err)
	require.Len(t, replicas, 2)
	for _, r := range replicas {
		info, err := r.Info(ctx, "replication")
		require.NoError(t, err)
		assert.Equal(t, "up", info["master_link_status"])
	}

	addr := c.Nodes()[0].Addr()
	rc, err := dialRESP(ctx, addr, &tls.Config{RootCAs: certs.Pool})
	if err == nil {
		// TLS 1.3 finishes the client's side of the handshake before the
		// server checks for a certificate: the refusal comes on first use.
		_, err = rc.do(ctx, []string{"PING"})
		_ = rc.close()
	}
	assert.Error(t, err, "no client certificate")
	_, err = dialRESP(ctx, addr, &tls.Config{RootCAs: x509.NewCertPool()})
	var unknown x509.UnknownAuthorityError
	assert.ErrorAs(t, err, &unknown)
}

// TestTLSStandalone: a standalone server started WithTLS has no plain
// port, and the harness's own commands and held connections use TLS.
func TestTLSStandalone(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 30*time.Second)
	s := StartStandalone(t, WithTLS(NewCerts(t)))
	conn, err := s.Dial(ctx)
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.Do(ctx, "SET", "k", "v")
	require.NoError(t, err)
	v, err := s.Do(ctx, "GET", "k")
	require.NoError(t, err)
	assert.Equal(t, "v", v)

	// Plain RESP to the TLS port gets no reply.
	nc, err := net.Dial("tcp", s.Addr())
	require.NoError(t, err)
	defer nc.Close()
	require.NoError(t, nc.SetDeadline(time.Now().Add(2*time.Second)))
	_, err = nc.Write([]byte("PING\r\n"))
	require.NoError(t, err)
	buf := make([]byte, 16)
	n, _ := nc.Read(buf)
	assert.NotEqual(t, "+PONG\r\n", string(buf[:n]))
}
