package resp

import (
	"bufio"
	"fmt"
	"io"
	"slices"
)

// Reader parses RESP2 values straight from the buffer of a bufio.Reader.
// Its primitives allocate nothing: lines and bulk strings are views of the
// buffer, valid until the next read (of the Reader or of the bufio.Reader),
// as with bufio.Reader.ReadSlice. Only a bulk string larger than the
// buffer is copied, into a scratch buffer the Reader reuses. A Reader is
// not safe for concurrent use.
type Reader struct {
	r       *bufio.Reader
	scratch []byte // holds a bulk too large for the buffer
}

// NewReader returns a Reader over r. The size of r's buffer bounds a line
// and decides which bulk strings are read without a copy.
func NewReader(r *bufio.Reader) *Reader { return &Reader{r: r} }

// Line returns the next CRLF-terminated line without its terminator: a
// type byte and what follows it. The slice is a view of the buffer, valid
// until the next read. A line longer than the buffer is ErrProtocol.
func (rd *Reader) Line() ([]byte, error) {
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

// Peek returns the type byte of the next reply without consuming it.
func (rd *Reader) Peek() (byte, error) {
	b, err := rd.r.Peek(1)
	if err != nil {
		return 0, err
	}
	return b[0], nil
}

// ArrayHeader reads an array header and returns its length, -1 for a null
// array. Any other value is ErrProtocol.
func (rd *Reader) ArrayHeader() (int, error) {
	line, err := rd.Line()
	if err != nil {
		return 0, err
	}
	if line[0] != '*' {
		return 0, fmt.Errorf("%w: want an array, got %q", ErrProtocol, line)
	}
	return parseLen(line)
}

// Bulk reads a bulk string; null reports the null bulk string. The bytes
// are a view of the read buffer (or of the scratch buffer for one larger
// than it), valid until the next read. Any other value is ErrProtocol.
func (rd *Reader) Bulk() (b []byte, null bool, err error) {
	line, err := rd.Line()
	if err != nil {
		return nil, false, err
	}
	if line[0] != '$' {
		return nil, false, fmt.Errorf("%w: want a bulk string, got %q", ErrProtocol, line)
	}
	// Parsed here rather than by parseLen, and the buffered case read here
	// too: this is the subscribe wire's hot path, where calls show.
	n, err := ParseInt(line[1:])
	if err != nil {
		return nil, false, err
	}
	if n < 0 {
		if n != -1 {
			return nil, false, fmt.Errorf("%w: bad length %q", ErrProtocol, line)
		}
		return nil, true, nil
	}
	if n+2 > rd.r.Size() {
		b, err = rd.largeBulk(n)
		return b, false, err
	}
	b, err = rd.r.Peek(n + 2)
	if err != nil {
		return nil, false, err
	}
	if b[n] != '\r' || b[n+1] != '\n' {
		return nil, false, fmt.Errorf("%w: bulk string of %d bytes not terminated", ErrProtocol, n)
	}
	// Consumed but not overwritten: the buffer moves only on the next read.
	_, _ = rd.r.Discard(n + 2)
	return b[:n], false, nil
}

// largeBulk reads the n bytes and CRLF that follow the header of a bulk
// string larger than the buffer into the scratch buffer.
func (rd *Reader) largeBulk(n int) ([]byte, error) {
	// Grow the scratch only as the bytes arrive: a corrupt length must not
	// allocate memory the peer never sends (make would panic or abort).
	size := rd.r.Size()
	b := rd.scratch[:0]
	for len(b) < n+2 {
		if len(b) == cap(b) {
			b = slices.Grow(b, min(n+2-len(b), max(len(b), size)))
		}
		k, err := io.ReadFull(rd.r, b[len(b):min(cap(b), n+2)])
		if err != nil {
			return nil, err
		}
		b = b[:len(b)+k]
	}
	rd.scratch = b
	if cap(rd.scratch) > 4*size {
		rd.scratch = nil // keep one huge payload from staying resident
	}
	if b[n] != '\r' || b[n+1] != '\n' {
		return nil, fmt.Errorf("%w: bulk string of %d bytes not terminated", ErrProtocol, n)
	}
	return b[:n], nil
}

// Skip reads and ignores n values of any type, nested arrays included,
// without allocating and without recursion (a hostile nesting depth cannot
// exhaust the stack).
func (rd *Reader) Skip(n int) error {
	for ; n > 0; n-- {
		line, err := rd.Line()
		if err != nil {
			return err
		}
		switch line[0] {
		case '+', '-', ':':
		case '$':
			l, err := parseLen(line)
			if err != nil {
				return err
			}
			if l >= 0 {
				if _, err := rd.r.Discard(l + 2); err != nil {
					return err
				}
			}
		case '*':
			l, err := parseLen(line)
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

// parseLen parses the length of a bulk or array header line; -1 is null.
func parseLen(line []byte) (int, error) {
	n, err := ParseInt(line[1:])
	if err == nil && n < -1 {
		return 0, fmt.Errorf("%w: bad length %q", ErrProtocol, line)
	}
	return n, err
}

// ParseInt parses a RESP length or integer of at most 18 digits, so that
// it cannot overflow; anything else is ErrProtocol.
func ParseInt(b []byte) (int, error) {
	neg := len(b) > 0 && b[0] == '-'
	digits := b
	if neg {
		digits = b[1:]
	}
	if len(digits) == 0 || len(digits) > 18 {
		return 0, fmt.Errorf("%w: bad integer %q", ErrProtocol, b)
	}
	n := 0
	for _, c := range digits {
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
