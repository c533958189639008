package resp

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAppendCommand(t *testing.T) {
	got := AppendCommand([]byte("x"), "SUBSCRIBE", []string{"a", "", strings.Repeat("b", 12)})
	assert.Equal(t, "x*4\r\n$9\r\nSUBSCRIBE\r\n$1\r\na\r\n$0\r\n\r\n$12\r\nbbbbbbbbbbbb\r\n", string(got), "appends to b")
	assert.Equal(t, "*1\r\n$4\r\nPING\r\n", string(AppendCommand(nil, "PING", nil)))
}

// TestAppendPrefixed: each arg is sent as prefix+arg, as AppendCommand
// would send the joined strings.
func TestAppendPrefixed(t *testing.T) {
	assert.Equal(t, string(AppendCommand([]byte("x"), "SSUBSCRIBE", []string{"{06}.a", "{06}.", "{06}.bbbbb"})),
		string(AppendPrefixed([]byte("x"), "SSUBSCRIBE", "{06}.", []string{"a", "", "bbbbb"})))
	assert.Equal(t, "*2\r\n$9\r\nSUBSCRIBE\r\n$1\r\na\r\n", string(AppendPrefixed(nil, "SUBSCRIBE", "", []string{"a"})))
}

// TestCommandLen: the length CommandLen gives is what AppendPrefixed
// appends, across the digit-count boundaries of every length it writes.
func TestCommandLen(t *testing.T) {
	for _, args := range [][]string{nil, {""}, {"a", strings.Repeat("b", 9), strings.Repeat("c", 10)}, make([]string, 10), {strings.Repeat("d", 1000)}} {
		for _, verb := range []string{"PING", "SSUBSCRIBE", strings.Repeat("v", 99)} {
			for _, prefix := range []string{"", "{0a}.", strings.Repeat("p", 95)} {
				assert.Len(t, AppendPrefixed(nil, verb, prefix, args), CommandLen(verb, prefix, args), "%s %q %q", verb, prefix, args)
			}
		}
	}
}

func TestAppendHeader(t *testing.T) {
	for n, want := range map[int]string{0: "$0\r\n", 7: "$7\r\n", 10: "$10\r\n", 65536: "$65536\r\n", -1: "$-1\r\n", -5: "$-1\r\n"} {
		assert.Equal(t, want, string(AppendHeader(nil, '$', n)), "%d", n)
	}
	assert.Equal(t, "*9223372036854775807\r\n", string(AppendHeader(nil, '*', 1<<63-1)))
}

// TestWriteThenRead: whatever the writer encodes, Reply decodes back.
func TestWriteThenRead(t *testing.T) {
	b := AppendCommand(nil, "SET", []string{"k", "a\r\nb", ""})
	b = AppendHeader(b, '*', 2)
	b = AppendBulk(b, "s")
	b = AppendBulkBytes(b, []byte("bytes"))
	rd := readerOf(string(b), 16, chunkings[1].wrap)
	v, err := rd.Reply()
	require.NoError(t, err)
	assert.Equal(t, []any{"SET", "k", "a\r\nb", ""}, v)
	v, err = rd.Reply()
	require.NoError(t, err)
	assert.Equal(t, []any{"s", "bytes"}, v)
}

// TestAppendAllocatesNothing: encoding into a buffer with room allocates
// nothing, the promise the publish path relies on.
func TestAppendAllocatesNothing(t *testing.T) {
	buf := make([]byte, 0, 256)
	args := []string{"channel", "payload"}
	p := []byte("payload")
	allocs := testing.AllocsPerRun(100, func() {
		b := AppendCommand(buf[:0], "PUBLISH", args)
		_ = AppendBulkBytes(b, p)
	})
	assert.Zero(t, allocs)
}
