package resp

import (
	"bufio"
	"fmt"
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
