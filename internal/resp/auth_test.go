package resp

import (
	"bufio"
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeLogin serves one AUTH on the server end of a pipe: it reads the
// command, sends it on got, then writes reply (nothing when reply is
// empty: a silent server).
func fakeLogin(t *testing.T, reply string) (client net.Conn, got <-chan []any) {
	t.Helper()
	client, server := net.Pipe()
	t.Cleanup(func() { _ = client.Close(); _ = server.Close() })
	cmds := make(chan []any, 1)
	go func() {
		v, err := NewReader(bufio.NewReader(server)).Reply()
		if err != nil {
			close(cmds)
			return
		}
		cmds <- v.([]any)
		if reply != "" {
			_, _ = server.Write([]byte(reply))
		}
	}()
	return client, cmds
}

func TestAuth(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	t.Run("password only", func(t *testing.T) {
		nc, got := fakeLogin(t, "+OK\r\n")
		require.NoError(t, Auth(ctx, nc, "", "pw"))
		assert.Equal(t, []any{"AUTH", "pw"}, <-got)
	})
	t.Run("acl user", func(t *testing.T) {
		nc, got := fakeLogin(t, "+OK\r\n")
		require.NoError(t, Auth(ctx, nc, "app", "pw"))
		assert.Equal(t, []any{"AUTH", "app", "pw"}, <-got)
	})
	t.Run("refused", func(t *testing.T) {
		nc, _ := fakeLogin(t, "-WRONGPASS invalid username-password pair\r\n")
		err := Auth(ctx, nc, "app", "secret-pw")
		se, ok := IsServerError(err)
		require.True(t, ok, "%v", err)
		assert.Equal(t, "WRONGPASS invalid username-password pair", se.Msg)
		assert.NotContains(t, err.Error(), "secret-pw")
	})
	t.Run("not a login reply", func(t *testing.T) {
		nc, _ := fakeLogin(t, ":1\r\n")
		assert.ErrorIs(t, Auth(ctx, nc, "", "pw"), ErrProtocol)
	})
}

// TestAuthBoundedByContext: a server that never answers fails the login
// with ctx's error when ctx ends, by deadline or by cancel.
func TestAuthBoundedByContext(t *testing.T) {
	t.Run("deadline", func(t *testing.T) {
		nc, got := fakeLogin(t, "")
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		assert.ErrorIs(t, Auth(ctx, nc, "", "pw"), context.DeadlineExceeded)
		assert.NotNil(t, <-got, "the command was sent")
	})
	t.Run("cancel", func(t *testing.T) {
		nc, got := fakeLogin(t, "")
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			<-got // the server has the command: the client now waits for its reply
			cancel()
		}()
		assert.ErrorIs(t, Auth(ctx, nc, "", "pw"), context.Canceled)
	})
}

// TestAuthLeavesNoDeadline: after a login whose ctx ended as it finished,
// the connection carries no deadline from it.
func TestAuthLeavesNoDeadline(t *testing.T) {
	client, server := net.Pipe()
	defer client.Close()
	defer server.Close()
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		_, _ = NewReader(bufio.NewReader(server)).Reply()
		_, _ = server.Write([]byte("+OK\r\n"))
	}()
	err := Auth(ctx, client, "", "pw")
	cancel() // after the login: must not reach the connection
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		_, err := server.Write([]byte("+PONG\r\n"))
		done <- err
	}()
	line, err := NewReader(bufio.NewReader(client)).Line()
	require.NoError(t, err, "a read after the login is not cut by a deadline")
	assert.Equal(t, "+PONG", string(line))
	require.NoError(t, <-done)
}
