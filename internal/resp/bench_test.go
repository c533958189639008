package resp

import (
	"bufio"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// loopReader serves block over and over, without allocating.
type loopReader struct {
	block []byte
	off   int
}

func (r *loopReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		k := copy(p[n:], r.block[r.off:])
		n += k
		r.off = (r.off + k) % len(r.block)
	}
	return n, nil
}

// BenchmarkParseInt is the length parser every value goes through.
func BenchmarkParseInt(b *testing.B) {
	in := []byte("65536")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseInt(in); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReaderBulk reads one bulk string per op from a 64 KiB buffer
// (the subscribe wire's): a view of the buffer when it fits and a scratch
// copy when it does not.
func BenchmarkReaderBulk(b *testing.B) {
	const bufSize = 64 << 10
	for _, size := range []int{16, 256, bufSize - 2, 200 << 10} {
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			rd := NewReader(bufio.NewReaderSize(&loopReader{block: []byte(bulk(strings.Repeat("b", size)))}, bufSize))
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				p, _, err := rd.Bulk()
				if err != nil || len(p) != size {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkEncodeResubscribe encodes what a fresh subscribe connection
// writes after a reconnect: 43 SSUBSCRIBE commands of 20 channels, each
// sent under its partition's key prefix, into a new buffer. "keys" builds
// each key string first and lets append grow the buffer, "sized" builds
// the keys and sizes the buffer once by CommandLen, "prefixed" writes
// prefix and channel straight into a buffer sized once (what subconn
// does). One op is the whole write.
func BenchmarkEncodeResubscribe(b *testing.B) {
	prefixes := make([]string, 43)
	cmds := make([][]string, len(prefixes))
	for i := range cmds {
		prefixes[i] = fmt.Sprintf("{%04x}.", i)
		for j := range 20 {
			cmds[i] = append(cmds[i], fmt.Sprintf("fleet:shardcast:%d:%d", i, j))
		}
	}
	keys := func(i int) []string {
		out := make([]string, len(cmds[i]))
		for j, ch := range cmds[i] {
			out[j] = prefixes[i] + ch
		}
		return out
	}
	b.Run("keys", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var buf []byte
			for i := range cmds {
				buf = AppendCommand(buf, "SSUBSCRIBE", keys(i))
			}
		}
	})
	b.Run("sized", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			ks := make([][]string, len(cmds))
			n := 0
			for i := range cmds {
				ks[i] = keys(i)
				n += CommandLen("SSUBSCRIBE", "", ks[i])
			}
			buf := slices.Grow([]byte(nil), n)
			for i := range ks {
				buf = AppendCommand(buf, "SSUBSCRIBE", ks[i])
			}
		}
	})
	b.Run("prefixed", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			n := 0
			for i := range cmds {
				n += CommandLen("SSUBSCRIBE", prefixes[i], cmds[i])
			}
			buf := slices.Grow([]byte(nil), n)
			for i := range cmds {
				buf = AppendPrefixed(buf, "SSUBSCRIBE", prefixes[i], cmds[i])
			}
		}
	})
}
