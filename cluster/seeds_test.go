package cluster

import (
	"net"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSeeds: New asks the seeds for the slot map in turn, skipping one
// that does not answer, on a connection it closes afterwards, so that a
// publish-only broker then holds one connection per master; it fails with
// an error naming the seed and the cause when no seed will do: a wrong
// password, or a server that is not a cluster node.
func TestSeeds(t *testing.T) {
	c := redistest.StartCluster(t, 1, 0, redistest.WithArgs("--user", "app", "on", ">pw", "~*", "&*", "+@all"))
	node := c.Nodes()[0]
	standalone := redistest.StartStandalone(t)
	gone := redistest.StartStandalone(t)
	goneAddr := gone.Addr()
	require.NoError(t, gone.Stop())
	login := shardcast.ConnOptions{Username: "app", Password: "pw", DialTimeout: 5 * time.Second}

	pub := newBroker(t, Config{Addrs: []string{goneAddr, node.Addr()}, Conn: login})
	require.NoError(t, pub.Publish(testCtx(t, 10*time.Second), "seeded", []byte("x")))
	requireConns(t, c, func(string) nodeConns { return nodeConns{command: 1} }, "publish-only broker")

	wrong := login
	wrong.Password = "nope"
	for name, cfg := range map[string]Config{
		"wrong password": {Addrs: []string{node.Addr()}, Conn: wrong},
		"not a cluster":  {Addrs: []string{standalone.Addr()}},
	} {
		b, err := New(cfg)
		require.Error(t, err, name)
		assert.Nil(t, b, name)
		assert.ErrorContains(t, err, cfg.Addrs[0], name)
		want := map[string]string{"wrong password": "WRONGPASS", "not a cluster": "cluster support disabled"}[name]
		assert.ErrorContains(t, err, want, name)
		t.Logf("%s: %v", name, err)
	}
}

// TestSeedsBehindSilentNodes: seeds that take a connection and never
// answer (a host gone from the network looks the same: the dial waits for
// DialTimeout) do not keep New from the live seed listed after them,
// although each alone would use up the whole DialTimeout New has to read
// the slot map.
func TestSeedsBehindSilentNodes(t *testing.T) {
	c := redistest.StartCluster(t, 1, 0)
	var seeds []string
	for range 3 {
		ln, err := net.Listen("tcp", "127.0.0.1:0") // never accepts: the kernel completes the handshake
		require.NoError(t, err)
		t.Cleanup(func() { ln.Close() })
		seeds = append(seeds, ln.Addr().String())
	}
	seeds = append(seeds, c.Nodes()[0].Addr())
	b := newBroker(t, Config{Addrs: seeds, Conn: shardcast.ConnOptions{DialTimeout: 2 * time.Second}})
	require.NoError(t, b.Publish(testCtx(t, 10*time.Second), "seeded", []byte("x")))
}
