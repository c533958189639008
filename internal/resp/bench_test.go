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
// writes after a reconnect, 43 SSUBSCRIBE commands of 20 channels into a
// new buffer: grown by append as it fills, or sized once by CommandLen
// (what subconn does). One op is the whole write.
func BenchmarkEncodeResubscribe(b *testing.B) {
	cmds := make([][]string, 43)
	for i := range cmds {
		for j := range 20 {
			cmds[i] = append(cmds[i], fmt.Sprintf("{%04x}.fleet:shardcast:%d:%d", i, i, j))
		}
	}
	encode := func(buf []byte) []byte {
		for _, c := range cmds {
			buf = AppendCommand(buf, "SSUBSCRIBE", c)
		}
		return buf
	}
	b.Run("append", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			encode(nil)
		}
	})
	b.Run("sized", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			n := 0
			for _, c := range cmds {
				n += CommandLen("SSUBSCRIBE", c)
			}
			encode(slices.Grow([]byte(nil), n))
		}
	})
}
