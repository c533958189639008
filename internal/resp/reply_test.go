package resp

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestReply(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want any
	}{
		{"simple string", "+PONG\r\n", "PONG"},
		{"error", "-MOVED 3999 127.0.0.1:6381\r\n", &ServerError{Msg: "MOVED 3999 127.0.0.1:6381"}},
		{"integer", ":-42\r\n", int64(-42)},
		{"largest integer", ":9223372036854775807\r\n", int64(9223372036854775807)},
		{"bulk", "$5\r\nhe\r\nl\r\n", "he\r\nl"},
		{"bulk larger than the buffer", bulk(strings.Repeat("q", 100)), strings.Repeat("q", 100)},
		{"empty bulk", "$0\r\n\r\n", ""},
		{"null bulk", "$-1\r\n", nil},
		{"null array", "*-1\r\n", nil},
		{"empty array", "*0\r\n", []any{}},
		{"nested array", "*3\r\n:1\r\n*2\r\n+a\r\n$1\r\nb\r\n-ERR x\r\n", []any{int64(1), []any{"a", "b"}, &ServerError{Msg: "ERR x"}}},
	}
	for _, tc := range tests {
		for _, ch := range chunkings {
			t.Run(tc.name+"/"+ch.name, func(t *testing.T) {
				// A value after it checks that Reply consumed exactly one.
				rd := readerOf(tc.in+"+next\r\n", 32, ch.wrap)
				got, err := rd.Reply()
				require.NoError(t, err)
				assert.Equal(t, tc.want, got)
				next, err := rd.Reply()
				require.NoError(t, err)
				assert.Equal(t, "next", next)
			})
		}
	}
}

func TestReplyRejectsMalformed(t *testing.T) {
	for _, in := range []string{
		"",                             // EOF
		"\r\n",                         // empty line
		"?what\r\n",                    // unknown type
		"+no crlf\n",                   // bare LF
		":12a\r\n",                     // bad integer
		":9223372036854775808\r\n",     // integer out of range
		"$-2\r\n",                      // bad length
		"$1234567890123456789\r\n",     // length of 19 digits
		"$3\r\nabcd\r\n",               // wrong terminator
		"$3\r\nab",                     // truncated
		"*2\r\n:1\r\n",                 // array cut short
		"*1234567890123456789\r\n",     // array length of 19 digits
		strings.Repeat("*1\r\n", 1000), // nested deeper than maxDepth
	} {
		_, err := readerOf(in, 64, chunkings[0].wrap).Reply()
		assert.Error(t, err, "input %q", in)
	}
	_, err := readerOf(strings.Repeat("*1\r\n", maxDepth+1)+":1\r\n", 64, chunkings[0].wrap).Reply()
	assert.ErrorIs(t, err, ErrProtocol, "nesting deeper than maxDepth")
	v, err := readerOf(strings.Repeat("*1\r\n", maxDepth)+":1\r\n", 64, chunkings[0].wrap).Reply()
	require.NoError(t, err, "nesting of maxDepth")
	for range maxDepth {
		v = v.([]any)[0]
	}
	assert.Equal(t, int64(1), v)
}
