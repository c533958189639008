package resp

import (
	"bufio"
	"bytes"
	"testing"
)

// FuzzReader feeds arbitrary bytes to every way of reading: none may
// panic, and each must stop at the end of the input.
func FuzzReader(f *testing.F) {
	for _, seed := range []string{
		"+OK\r\n", "-ERR x\r\n", ":-1\r\n", "$3\r\nabc\r\n", "$-1\r\n", "*-1\r\n",
		"*2\r\n$1\r\na\r\n*1\r\n:1\r\n", "$99999999999\r\nab", "*1\r\n*1\r\n*1\r\n", "$2\r\nabc\r\n",
		"*3\r\n$7\r\nmessage\r\n$1\r\na\r\n$40\r\n0123456789012345678901234567890123456789\r\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		newReader := func() *Reader { return NewReader(bufio.NewReaderSize(bytes.NewReader(in), 16)) }
		for rd := newReader(); ; {
			if _, err := rd.Reply(); err != nil {
				break
			}
		}
		for rd := newReader(); ; {
			if err := rd.Skip(1); err != nil {
				break
			}
		}
		for rd := newReader(); ; {
			b, null, err := rd.Bulk()
			if err != nil {
				break
			}
			if null && b != nil {
				t.Fatal("a null bulk with bytes")
			}
		}
		for rd := newReader(); ; {
			if _, err := rd.ArrayHeader(); err != nil {
				break
			}
		}
	})
}

// FuzzPeekBulks3 checks PeekBulks3 against the value-by-value reading of
// the same bytes: whatever array of three bulk strings it finds, an
// ArrayHeader and three Bulk calls read too, with the same elements and
// the same size, and a look that finds none consumes nothing.
func FuzzPeekBulks3(f *testing.F) {
	for _, seed := range []string{
		"*3\r\n$7\r\nmessage\r\n$1\r\na\r\n$3\r\nabc\r\n", "*3\r\n$0\r\n\r\n$0\r\n\r\n$0\r\n\r\n",
		"*3\r\n$9\r\nsubscribe\r\n$1\r\nc\r\n:1\r\n", "*3\r\n$-1\r\n$1\r\na\r\n$1\r\nb\r\n", "*3\r\n$01\r\na\r\n",
	} {
		f.Add([]byte(seed), 64)
	}
	f.Fuzz(func(t *testing.T, in []byte, size int) {
		size = 16 + size&1023
		newReader := func() *Reader { return NewReader(bufio.NewReaderSize(bytes.NewReader(in), size)) }
		rd := newReader()
		if _, err := rd.Peek(); err != nil {
			return
		}
		a, b, c, n, ok := rd.PeekBulks3()
		if !ok {
			if rd.r.Buffered() == 0 && len(in) > 0 {
				t.Fatal("a failed look consumed the buffer")
			}
			return
		}
		got := [][]byte{bytes.Clone(a), bytes.Clone(b), bytes.Clone(c)}
		slow := newReader()
		if l, err := slow.ArrayHeader(); err != nil || l != 3 {
			t.Fatalf("PeekBulks3 found an array the header reads as %d, %v", l, err)
		}
		for i, want := range got {
			e, null, err := slow.Bulk()
			if err != nil || null || !bytes.Equal(e, want) {
				t.Fatalf("element %d: PeekBulks3 %q, Bulk %q (null %v, %v)", i, want, e, null, err)
			}
		}
		rd.Discard(n)
		if rest, slowRest := rd.r.Buffered(), slow.r.Buffered(); int64(rest) != int64(slowRest) && len(in) <= size {
			t.Fatalf("PeekBulks3's size %d leaves %d bytes, the slow path %d", n, rest, slowRest)
		}
	})
}
