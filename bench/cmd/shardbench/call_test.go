package main

import (
	"context"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shardcast/shardcast/bench/internal/launch"
)

// redisTopos starts the presence and map scenarios' two topologies on
// Redis servers of the test's own, stopped when it ends; it skips the
// test under -short or without redis-server.
func redisTopos(t *testing.T) (context.Context, []callTopo) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts Redis servers")
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("no redis-server")
	}
	set, err := launch.NewSet()
	require.NoError(t, err)
	t.Cleanup(set.Close)
	ctx := context.Background()
	topos, err := callTopos(ctx, newEnv(set, nil, nil, nil))
	require.NoError(t, err)
	require.Len(t, topos[1].Servers, 3)
	return ctx, topos
}
