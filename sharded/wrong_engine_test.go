package sharded

import (
	"context"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestNewOnClusterNodeNamesCluster: sharded.New given a Redis Cluster
// node, as its only address or after a standalone one, fails with
// ErrWrongEngine, an error that names cluster.New and the node, instead of
// broadcasting classic PUBLISH over the cluster; the same instances
// without the cluster node make a working broker.
func TestNewOnClusterNodeNamesCluster(t *testing.T) {
	c := redistest.StartCluster(t, 1, 0)
	node := c.Nodes()[0]
	standalone := redistest.StartStandalone(t)
	for name, addrs := range map[string][]string{
		"alone":             {node.Addr()},
		"after an instance": {standalone.Addr(), node.Addr()},
	} {
		b, err := New(Config{Addrs: addrs})
		require.Error(t, err, name)
		assert.Nil(t, b, name)
		assert.ErrorIs(t, err, shardcast.ErrWrongEngine, name)
		assert.ErrorContains(t, err, "cluster.New", name)
		assert.ErrorContains(t, err, node.Addr(), name)
		t.Logf("%s: %v", name, err)
	}
	b := newBroker(t, Config{Addrs: []string{standalone.Addr()}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, b.Publish(ctx, "x", []byte("y")))
}

// TestClusterEnabled reads INFO cluster's field as Redis writes it.
func TestClusterEnabled(t *testing.T) {
	assert.True(t, clusterEnabled("# Cluster\r\ncluster_enabled:1\r\n"))
	assert.False(t, clusterEnabled("# Cluster\r\ncluster_enabled:0\r\n"))
	assert.False(t, clusterEnabled(""))
}
