package resp

import (
	"fmt"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestServerError(t *testing.T) {
	for msg, moved := range map[string]bool{
		"MOVED 3999 127.0.0.1:6381":                             true,
		"ASK 3999 127.0.0.1:6381":                               true,
		"CROSSSLOT Keys in request don't hash to the same slot": false,
		"MOVEDX": false,
		"ERR":    false,
	} {
		err := fmt.Errorf("wrapped: %w", &ServerError{Msg: msg})
		se, ok := IsServerError(err)
		require.True(t, ok)
		assert.Equal(t, moved, se.IsMoved(), msg)
		assert.Equal(t, "redis: "+msg, se.Error())
	}
	_, ok := IsServerError(io.EOF)
	assert.False(t, ok)
	_, ok = IsServerError(nil)
	assert.False(t, ok)
}
