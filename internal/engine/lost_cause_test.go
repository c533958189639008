package engine

import (
	"errors"
	"io"
	"syscall"
	"testing"

	"github.com/shardcast/shardcast/internal/subconn"
	"github.com/stretchr/testify/assert"
)

// TestLostCause: the cause of a lost subscribe connection says what
// happened to which connection, and keeps the wire's error reachable.
func TestLostCause(t *testing.T) {
	ping := errors.New("no answer to a health PING")
	for _, c := range []struct {
		err, dropped error
		want         string
	}{
		{io.EOF, nil, "subscribe connection closed by the server (it stopped, restarted, or dropped this client): EOF"},
		{subconn.ErrClosed, ping, "subscribe connection: no answer to a health PING"},
		{subconn.ErrClosed, nil, "subscribe connection closed by the broker after a failed command: subconn: connection closed"},
		{syscall.ECONNRESET, nil, "subscribe connection lost: connection reset by peer"},
		{nil, nil, "subscribe connection closed"},
	} {
		got := lostCause(c.err, c.dropped)
		assert.EqualError(t, got, c.want)
		if c.dropped != nil {
			assert.ErrorIs(t, got, c.dropped)
		} else if c.err != nil {
			assert.ErrorIs(t, got, c.err)
		}
	}
}
