package pubconn

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shardcast/shardcast/internal/resp"
	"github.com/shardcast/shardcast/internal/subconn"
	"github.com/shardcast/shardcast/redistest"
)

// TestRefusedConnectionSaysWhy: a server at maxclients answers a new
// connection with an error and closes it, before any command arrives.
// Whether that reply comes before or after the first command was queued,
// the command fails with the server's error, not with the closed socket
// it leaves behind. Each round races the reader against the first Ping.
func TestRefusedConnectionSaysWhy(t *testing.T) {
	s := redistest.StartStandalone(t)
	ctx := testCtx(t)
	admin, err := s.Dial(ctx)
	require.NoError(t, err)
	defer admin.Close()
	require.NoError(t, admin.SetMaxClients(ctx, 1))
	for range 100 {
		p := New(subconn.Dialer{Addr: s.Addr()}, Timeouts{Write: time.Second, Reply: time.Second})
		err := p.Ping(ctx)
		p.Close()
		require.ErrorContains(t, err, "max number of clients reached")
		_, isReply := resp.IsServerError(err)
		require.True(t, isReply, "%v does not wrap the server's error", err)
	}
}
