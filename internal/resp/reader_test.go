package resp

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// bulk encodes s as a bulk string, as a server sends it.
func bulk(s string) string { return fmt.Sprintf("$%d\r\n%s\r\n", len(s), s) }

// chunkings are the ways a test stream reaches the Reader: whole, one byte
// per Read (every value straddles reads), and half of what each Read asks.
var chunkings = []struct {
	name string
	wrap func(io.Reader) io.Reader
}{
	{"whole", func(r io.Reader) io.Reader { return r }},
	{"onebyte", iotest.OneByteReader},
	{"half", iotest.HalfReader},
}

// readerOf is a Reader over stream with a buffer of size bytes (bufio's
// minimum is 16), fed through wrap.
func readerOf(stream string, size int, wrap func(io.Reader) io.Reader) *Reader {
	return NewReader(bufio.NewReaderSize(wrap(strings.NewReader(stream)), size))
}

func TestLine(t *testing.T) {
	for _, ch := range chunkings {
		rd := readerOf("+OK\r\n:-12\r\n-ERR x y\r\n", 16, ch.wrap)
		for _, want := range []string{"+OK", ":-12", "-ERR x y"} {
			line, err := rd.Line()
			require.NoError(t, err, ch.name)
			assert.Equal(t, want, string(line), ch.name)
		}
		_, err := rd.Line()
		assert.ErrorIs(t, err, io.EOF, ch.name)
	}
}

func TestLineRejectsMalformed(t *testing.T) {
	for name, in := range map[string]string{
		"bare LF":                "+OK\n",
		"nothing but CRLF":       "\r\n",
		"CR inside, LF end":      "+O\rK\n",
		"longer than the buffer": "+" + strings.Repeat("x", 64) + "\r\n",
	} {
		_, err := readerOf(in, 16, chunkings[0].wrap).Line()
		assert.ErrorIs(t, err, ErrProtocol, name)
	}
}

// TestBulk reads bulk strings that fit the buffer (views) and that do not
// (scratch copies), fed whole and in pieces, each followed by a null.
func TestBulk(t *testing.T) {
	for _, size := range []int{16, 64} {
		for _, ch := range chunkings {
			for _, s := range []string{"", "x", "a\r\nb", strings.Repeat("y", size-2), strings.Repeat("z", size-1), strings.Repeat("w", 3*size+1)} {
				what := fmt.Sprintf("%d/%s/%d bytes", size, ch.name, len(s))
				rd := readerOf(bulk(s)+"$-1\r\n", size, ch.wrap)
				b, null, err := rd.Bulk()
				require.NoError(t, err, what)
				assert.False(t, null, what)
				assert.Equal(t, s, string(b), what)
				_, null, err = rd.Bulk()
				require.NoError(t, err, what)
				assert.True(t, null, what)
			}
		}
	}
}

func TestBulkRejectsMalformed(t *testing.T) {
	for name, in := range map[string]string{
		"integer":               ":1\r\n",
		"bad length":            "$1x\r\n",
		"length below -1":       "$-2\r\n",
		"not terminated":        "$3\r\nabcd\r\n",
		"large, not terminated": "$40\r\n" + strings.Repeat("z", 40) + "xx",
	} {
		_, _, err := readerOf(in, 16, chunkings[0].wrap).Bulk()
		assert.ErrorIs(t, err, ErrProtocol, name)
	}
}

func TestArrayHeader(t *testing.T) {
	rd := readerOf("*3\r\n*0\r\n*-1\r\n+OK\r\n*-2\r\n", 16, chunkings[0].wrap)
	for _, want := range []int{3, 0, -1} {
		n, err := rd.ArrayHeader()
		require.NoError(t, err)
		assert.Equal(t, want, n)
	}
	for range 2 { // a simple string, then a length below -1
		_, err := rd.ArrayHeader()
		assert.ErrorIs(t, err, ErrProtocol)
	}
}

func TestSkip(t *testing.T) {
	values := "+OK\r\n-ERR\r\n:12\r\n$3\r\nabc\r\n$-1\r\n*-1\r\n*0\r\n*2\r\n*2\r\n:1\r\n$0\r\n\r\n+x\r\n"
	for _, ch := range chunkings {
		rd := readerOf(values+"+after\r\n", 16, ch.wrap)
		require.NoError(t, rd.Skip(8), ch.name)
		line, err := rd.Line()
		require.NoError(t, err, ch.name)
		assert.Equal(t, "+after", string(line), ch.name)
	}
	for name, in := range map[string]string{
		"unknown type":     "?x\r\n",
		"bad bulk length":  "$x\r\n",
		"bad array length": "*-3\r\n",
	} {
		assert.ErrorIs(t, readerOf(in, 16, chunkings[0].wrap).Skip(1), ErrProtocol, name)
	}
}

// TestSkipDeeplyNested: Skip counts nested elements instead of recursing,
// so no nesting depth can overflow the stack.
func TestSkipDeeplyNested(t *testing.T) {
	stream := strings.Repeat("*1\r\n", 200_000) + ":1\r\n+after\r\n"
	rd := readerOf(stream, 4096, chunkings[0].wrap)
	require.NoError(t, rd.Skip(1))
	line, err := rd.Line()
	require.NoError(t, err)
	assert.Equal(t, "+after", string(line))
}

func TestParseInt(t *testing.T) {
	for in, want := range map[string]int{"0": 0, "7": 7, "-1": -1, "1234": 1234, "999999999999999999": 999999999999999999, "-999999999999999999": -999999999999999999} {
		got, err := ParseInt([]byte(in))
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "-", "+1", "1a", " 1", "1 ", "1234567890123456789", "--1", "1-"} {
		_, err := ParseInt([]byte(in))
		assert.ErrorIs(t, err, ErrProtocol, "%q", in)
	}
}

// TestCorruptLengthAllocatesOnlyWhatArrives: a header claiming a gigabyte
// (bulk) or a billion elements (array), followed by a little data and the
// end of the stream, must end as a truncated stream having allocated about
// what arrived, not the claimed size (a larger claim would make an
// up-front make panic or exhaust memory).
func TestCorruptLengthAllocatesOnlyWhatArrives(t *testing.T) {
	bulkClaim := "$1073741824\r\n" + strings.Repeat("z", 256<<10)
	arrayClaim := "*1073741824\r\n" + strings.Repeat(":1\r\n", 64<<10)
	cases := []struct {
		name   string
		stream string
		read   func(rd *Reader) error
	}{
		{"Bulk", bulkClaim, func(rd *Reader) error { _, _, err := rd.Bulk(); return err }},
		{"Reply of a bulk", bulkClaim, func(rd *Reader) error { _, err := rd.Reply(); return err }},
		{"Reply of an array", arrayClaim, func(rd *Reader) error { _, err := rd.Reply(); return err }},
		{"Skip of a bulk", bulkClaim, func(rd *Reader) error { return rd.Skip(1) }},
		{"Skip of an array", arrayClaim, func(rd *Reader) error { return rd.Skip(1) }},
	}
	for _, tc := range cases {
		rd := readerOf(tc.stream, 64<<10, chunkings[0].wrap)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		err := tc.read(rd)
		runtime.ReadMemStats(&after)
		assert.True(t, errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF), "%s: %v", tc.name, err)
		assert.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(32<<20), tc.name)
	}
}

// TestPeekBulks3: an array of three bulk strings the buffer holds whole
// is found in one pass and consumed only by Discard; anything else (other
// values, null or oversized lengths, a value cut short, malformed framing)
// is left, unconsumed, to the value-by-value primitives.
func TestPeekBulks3(t *testing.T) {
	msg := "*3\r\n" + bulk("message") + bulk("room.1") + bulk("hello\r\nworld")
	rd := readerOf(msg+msg, 4096, func(r io.Reader) io.Reader { return r })
	_, err := rd.Peek() // fill the buffer
	require.NoError(t, err)
	for range 2 {
		a, b, c, size, ok := rd.PeekBulks3()
		require.True(t, ok)
		assert.Equal(t, "message", string(a))
		assert.Equal(t, "room.1", string(b))
		assert.Equal(t, "hello\r\nworld", string(c))
		assert.Equal(t, len(msg), size)
		rd.Discard(size)
	}

	empty := "*3\r\n" + bulk("smessage") + bulk("") + bulk("")
	rd = readerOf(empty, 4096, func(r io.Reader) io.Reader { return r })
	_, err = rd.Peek()
	require.NoError(t, err)
	a, b, c, size, ok := rd.PeekBulks3()
	require.True(t, ok)
	assert.Equal(t, "smessage", string(a))
	assert.Empty(t, b)
	assert.Empty(t, c)
	assert.Equal(t, len(empty), size)

	for name, stream := range map[string]string{
		"confirmation":    "*3\r\n" + bulk("subscribe") + bulk("c") + ":1\r\n",
		"pmessage":        "*4\r\n" + bulk("pmessage") + bulk("p*") + bulk("c") + bulk("x"),
		"null element":    "*3\r\n" + bulk("message") + "$-1\r\n" + bulk("x"),
		"cut short":       msg[:len(msg)-1],
		"header cut":      "*3\r\n$7",
		"unterminated":    "*3\r\n" + bulk("message") + bulk("c") + "$1\r\nxy\r\n",
		"bad header":      "*3\r\n$7\n" + "message\r\n" + bulk("c") + bulk("x"),
		"eleven digits":   "*3\r\n" + bulk("message") + bulk("c") + "$00000000001\r\nx\r\n",
		"no digits":       "*3\r\n$\r\n\r\n" + bulk("c") + bulk("x"),
		"not an array":    "+OK\r\n",
		"array of 30":     "*30\r\n",
		"integer element": "*3\r\n" + bulk("message") + ":1\r\n" + bulk("x"),
	} {
		rd := readerOf(stream, 4096, func(r io.Reader) io.Reader { return r })
		_, err := rd.Peek()
		require.NoError(t, err, name)
		_, _, _, _, ok := rd.PeekBulks3()
		assert.False(t, ok, name)
		line, err := rd.Line()
		require.NoError(t, err, name)
		assert.Equal(t, strings.SplitN(stream, "\r\n", 2)[0], string(line), "%s: nothing consumed", name)
	}
}
