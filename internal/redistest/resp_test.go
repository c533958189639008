package redistest

import (
	"bufio"
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestReadReply(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want any
	}{
		{"simple string", "+PONG\r\n", "PONG"},
		{"error", "-MOVED 3999 127.0.0.1:6381\r\n", RedisError("MOVED 3999 127.0.0.1:6381")},
		{"integer", ":-42\r\n", int64(-42)},
		{"bulk", "$5\r\nhe\r\nl\r\n", "he\r\nl"},
		{"empty bulk", "$0\r\n\r\n", ""},
		{"null bulk", "$-1\r\n", nil},
		{"null array", "*-1\r\n", nil},
		{"nested array", "*3\r\n:1\r\n*2\r\n+a\r\n$1\r\nb\r\n-ERR x\r\n", []any{int64(1), []any{"a", "b"}, RedisError("ERR x")}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := readReply(bufio.NewReader(strings.NewReader(tc.in)))
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestReadReplyRejectsMalformed(t *testing.T) {
	for _, in := range []string{
		"",                  // EOF
		"\r\n",              // empty line
		"?what\r\n",         // unknown type
		"+no crlf\n",        // bare LF
		":12a\r\n",          // bad integer
		"$-2\r\n",           // bad length
		"$999999999999\r\n", // over the limit
		"$3\r\nabcd\r\n",    // wrong terminator
		"$3\r\nab",          // truncated
		"*2\r\n:1\r\n",      // array cut short
		"*99999999999\r\n",  // array over the limit
	} {
		_, err := readReply(bufio.NewReader(strings.NewReader(in)))
		assert.Error(t, err, "input %q", in)
	}
}

func TestWriteCommand(t *testing.T) {
	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	writeCommand(w, []string{"SET", "k", "", "a\r\nb"})
	require.NoError(t, w.Flush())
	assert.Equal(t, "*4\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n$4\r\na\r\nb\r\n", buf.String())
}

func TestRedisErrorText(t *testing.T) {
	assert.Equal(t, "CLUSTERDOWN The cluster is down", RedisError("CLUSTERDOWN The cluster is down").Error())
}
