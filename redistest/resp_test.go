package redistest

import (
	"bufio"
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardcast/shardcast/internal/resp"
)

// TestDoPipelines: do writes every command before reading, and returns one
// reply per command, an error reply as a *resp.ServerError value among
// them rather than as the call's error.
func TestDoPipelines(t *testing.T) {
	client, server := net.Pipe()
	defer client.Close()
	served := make(chan [][]any, 1)
	go func() {
		defer server.Close()
		rd := resp.NewReader(bufio.NewReader(server))
		var cmds [][]any
		for range 2 {
			cmd, err := rd.Reply()
			if err != nil {
				break
			}
			cmds = append(cmds, cmd.([]any))
		}
		served <- cmds
		_, _ = server.Write([]byte("+OK\r\n-ERR unknown command\r\n"))
	}()
	c := &respConn{nc: client, rd: resp.NewReader(bufio.NewReader(client))}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	replies, err := c.do(ctx, []string{"SET", "k", "a\r\nb"}, []string{"NOPE"})
	require.NoError(t, err)
	assert.Equal(t, [][]any{{"SET", "k", "a\r\nb"}, {"NOPE"}}, <-served)
	require.Len(t, replies, 2)
	assert.Equal(t, "OK", replies[0])
	assert.Equal(t, &resp.ServerError{Msg: "ERR unknown command"}, replies[1])
}

// TestDoRejectsEmptyCommand: a command needs at least its name.
func TestDoRejectsEmptyCommand(t *testing.T) {
	client, server := net.Pipe()
	defer client.Close()
	defer server.Close()
	c := &respConn{nc: client, rd: resp.NewReader(bufio.NewReader(client))}
	_, err := c.do(context.Background(), []string{})
	assert.Error(t, err)
}
