package centrifugebroker

import (
	"errors"
	"runtime"
	"testing"

	"github.com/centrifugal/centrifuge"
	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/cluster"
	"github.com/shardcast/shardcast/sharded"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNewRejectsConfig(t *testing.T) {
	node, err := centrifuge.New(centrifuge.Config{})
	require.NoError(t, err)
	addrs := []string{"127.0.0.1:1"} // never dialled: validation comes first
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"no engine", Config{}},
		{"both engines", Config{Cluster: &cluster.Config{Addrs: addrs}, Sharded: &sharded.Config{Addrs: addrs}}},
		{"user Handler", Config{Sharded: &sharded.Config{Addrs: addrs, Options: shardcast.Options{Handler: func(shardcast.Message) {}}}}},
		{"user OnEvent", Config{Cluster: &cluster.Config{Addrs: addrs, Options: shardcast.Options{OnEvent: func(shardcast.Event) {}}}}},
		{"negative CallTimeout", Config{Sharded: &sharded.Config{Addrs: addrs}, CallTimeout: -1}},
		{"engine's own validation", Config{Sharded: &sharded.Config{}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := New(node, tc.cfg)
			assert.Nil(t, b)
			assert.True(t, errors.Is(err, shardcast.ErrInvalidConfig), "got %v", err)
		})
	}
	_, err = New(nil, Config{Sharded: &sharded.Config{Addrs: addrs}})
	assert.True(t, errors.Is(err, shardcast.ErrInvalidConfig), "nil node: got %v", err)
}

func TestConfigDefaults(t *testing.T) {
	c, err := Config{Sharded: &sharded.Config{Addrs: []string{"x:1"}}}.withDefaults()
	require.NoError(t, err)
	assert.Equal(t, DefaultCallTimeout, c.CallTimeout)
	assert.Equal(t, DefaultControlChannel, c.ControlChannel)
	assert.NotNil(t, c.Logger)
}

func TestWorkersDefault(t *testing.T) {
	procs := runtime.GOMAXPROCS(0)
	w, q := workers(shardcast.Options{})
	want := max(1, min(procs, shardcast.DefaultWorkers))
	require.Equal(t, want, w)
	require.Equal(t, shardcast.DefaultQueueSize*shardcast.DefaultWorkers/want, q)

	w, q = workers(shardcast.Options{QueueSize: 100})
	require.Equal(t, want, w)
	require.Equal(t, 100, q)

	// The user's Workers keep the engine's QueueSize default.
	w, q = workers(shardcast.Options{Workers: 64})
	require.Equal(t, 64, w)
	require.Equal(t, 0, q)
}
