package redistest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDialAtMaxClients: a held connection keeps working once the server
// is at maxclients, while Dial then returns the server's refusal, and
// succeeds again once a client slot frees.
func TestDialAtMaxClients(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 30*time.Second)
	s := StartStandalone(t)
	admin, err := s.Dial(ctx)
	require.NoError(t, err)
	defer admin.Close()
	filler, err := s.Dial(ctx)
	require.NoError(t, err)
	open, err := admin.ClientsOpen(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, open)
	require.NoError(t, admin.SetMaxClients(ctx, 2))

	_, err = s.Dial(ctx)
	require.ErrorContains(t, err, "max number of clients reached")
	_, err = s.Do(ctx, "PING")
	require.ErrorContains(t, err, "max number of clients reached")
	rejected, err := admin.RejectedConnections(ctx)
	require.NoError(t, err)
	assert.Equal(t, 2, rejected)

	require.NoError(t, filler.Close())
	require.Eventually(t, func() bool {
		c, err := s.Dial(ctx)
		if err == nil {
			_ = c.Close()
		}
		return err == nil
	}, 10*time.Second, 10*time.Millisecond)
	_, err = admin.Do(ctx)
	assert.Error(t, err, "an empty command")
}
