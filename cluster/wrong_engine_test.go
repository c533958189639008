package cluster

import (
	"testing"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestNewOnStandaloneNamesSharded: cluster.New given a standalone
// instance (alone, or after a seed that does not answer) fails with
// ErrWrongEngine, an error that names sharded.New and keeps the server's
// reply, and leaves nothing running.
func TestNewOnStandaloneNamesSharded(t *testing.T) {
	standalone := redistest.StartStandalone(t)
	gone := redistest.StartStandalone(t)
	goneAddr := gone.Addr()
	require.NoError(t, gone.Stop())
	for name, seeds := range map[string][]string{
		"alone":             {standalone.Addr()},
		"after a dead seed": {goneAddr, standalone.Addr()},
	} {
		b, err := New(Config{Addrs: seeds})
		require.Error(t, err, name)
		assert.Nil(t, b, name)
		assert.ErrorIs(t, err, shardcast.ErrWrongEngine, name)
		assert.ErrorContains(t, err, "sharded.New", name)
		assert.ErrorContains(t, err, "cluster support disabled", name)
		assert.ErrorContains(t, err, standalone.Addr(), name)
		t.Logf("%s: %v", name, err)
	}

	// A cluster that cannot be reached is not called the wrong engine.
	_, err := New(Config{Addrs: []string{goneAddr}})
	require.Error(t, err)
	assert.NotErrorIs(t, err, shardcast.ErrWrongEngine)
}
