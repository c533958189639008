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

func TestRedirect(t *testing.T) {
	for msg, want := range map[string]Redirect{
		"MOVED 3999 127.0.0.1:6381":   {Slot: 3999, Addr: "127.0.0.1:6381"},
		"ASK 0 10.0.0.2:7000":         {Ask: true, Addr: "10.0.0.2:7000"},
		"MOVED 16383 ::1:7000":        {Slot: 16383, Addr: "[::1]:7000"},
		"MOVED 12 [::1]:7000":         {Slot: 12, Addr: "[::1]:7000"},
		"MOVED 5 :7001":               {Slot: 5, Addr: ":7001"},
		"MOVED 5 redis-3.local:7001":  {Slot: 5, Addr: "redis-3.local:7001"},
		"MOVED 16384 127.0.0.1:6381":  {},
		"MOVED -1 127.0.0.1:6381":     {},
		"MOVED 3999 127.0.0.1":        {},
		"MOVED 3999 127.0.0.1:0":      {},
		"MOVED 3999 127.0.0.1:70000":  {},
		"MOVED 3999":                  {},
		"MOVED":                       {},
		"ASKING":                      {},
		"ERR unknown command 'MOVED'": {},
		"TRYAGAIN Multiple keys":      {},
	} {
		got, ok := (&ServerError{Msg: msg}).Redirect()
		assert.Equal(t, want.Addr != "", ok, msg)
		assert.Equal(t, want, got, msg)
	}
}
