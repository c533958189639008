package subconn

import (
	"bufio"
	"fmt"
	"io"
	"slices"
)

// reader parses the RESP2 replies of a subscribed connection straight from
// the socket buffer.
type reader struct {
	r       *bufio.Reader
	pending int    // bytes of the last bulk still to discard
	scratch []byte // holds a bulk too large for the buffer
}

// line returns the next CRLF-terminated line without its terminator. The
// slice is valid until the next read.
func (rd *reader) line() ([]byte, error) {
	b, err := rd.r.ReadSlice('\n')
	if err != nil {
		if err == bufio.ErrBufferFull {
			return nil, fmt.Errorf("%w: line longer than %d bytes", ErrProtocol, rd.r.Size())
		}
		return nil, err
	}
	if len(b) < 3 || b[len(b)-2] != '\r' {
		return nil, fmt.Errorf("%w: malformed line %q", ErrProtocol, b)
	}
	return b[:len(b)-2], nil
}

// bulk reads a bulk string. The bytes are a view of the read buffer (or of
// a scratch buffer for one larger than it), valid until discard or the next
// read; the caller must call discard before reading on.
func (rd *reader) bulk() (b []byte, null bool, err error) {
	line, err := rd.line()
	if err != nil {
		return nil, false, err
	}
	if line[0] != '$' {
		return nil, false, fmt.Errorf("%w: want a bulk string, got %q", ErrProtocol, line)
	}
	n, err := parseInt(line[1:])
	if err != nil {
		return nil, false, err
	}
	if n < 0 {
		return nil, true, nil
	}
	if n+2 <= rd.r.Size() {
		b, err := rd.r.Peek(n + 2)
		if err != nil {
			return nil, false, err
		}
		if b[n] != '\r' || b[n+1] != '\n' {
			return nil, false, fmt.Errorf("%w: bulk string of %d bytes not terminated", ErrProtocol, n)
		}
		rd.pending = n + 2
		return b[:n], false, nil
	}
	rd.pending = 0
	// Grow the scratch only as the bytes arrive: a corrupt length must not
	// allocate memory the peer never sends (make would panic or abort).
	b = rd.scratch[:0]
	for len(b) < n+2 {
		if len(b) == cap(b) {
			b = slices.Grow(b, min(n+2-len(b), max(len(b), readBufferSize)))
		}
		k, err := io.ReadFull(rd.r, b[len(b):min(cap(b), n+2)])
		if err != nil {
			return nil, false, err
		}
		b = b[:len(b)+k]
	}
	rd.scratch = b
	if b[n] != '\r' || b[n+1] != '\n' {
		return nil, false, fmt.Errorf("%w: bulk string of %d bytes not terminated", ErrProtocol, n)
	}
	if cap(rd.scratch) > 4*readBufferSize {
		rd.scratch = nil // keep one huge payload from staying resident
	}
	return b[:n], false, nil
}

// discard consumes the bulk last returned by bulk.
func (rd *reader) discard() {
	if rd.pending > 0 {
		_, _ = rd.r.Discard(rd.pending) // peeked, so it is buffered
		rd.pending = 0
	}
}

// skipN reads and ignores n values of any type.
func (rd *reader) skipN(n int) error {
	for ; n > 0; n-- {
		line, err := rd.line()
		if err != nil {
			return err
		}
		switch line[0] {
		case '+', '-', ':':
		case '$':
			l, err := parseInt(line[1:])
			if err != nil {
				return err
			}
			if l >= 0 {
				if _, err := rd.r.Discard(l + 2); err != nil {
					return err
				}
			}
		case '*':
			l, err := parseInt(line[1:])
			if err != nil {
				return err
			}
			if l > 0 {
				n += l // its elements follow; counting them, not recursing, bounds the stack
			}
		default:
			return fmt.Errorf("%w: unexpected value %q", ErrProtocol, line)
		}
	}
	return nil
}

// parseInt parses a RESP length or integer.
func parseInt(b []byte) (int, error) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 18 {
		return 0, fmt.Errorf("%w: bad integer %q", ErrProtocol, b)
	}
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("%w: bad integer %q", ErrProtocol, b)
		}
		n = n*10 + int(c-'0')
	}
	if neg {
		n = -n
	}
	return n, nil
}
