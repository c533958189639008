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
