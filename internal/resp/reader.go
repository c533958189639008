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

// PeekBulks3 looks in the buffered bytes for a whole array of three bulk
// strings, such as a Pub/Sub message push, and returns views of its
// three elements and its size in bytes, without consuming it (Discard
// does) and without reading from the socket: one pass over the buffer
// where reading the array value by value takes a search for each of its
// four lines. ok is false, and nothing is looked at further, when the
// buffer does not start with such an array whole: another kind of value,
// a null element, a length of more than 10 digits, a value still on its
// way, or a malformed one; the value-by-value primitives then read it and
// report what is wrong with it. The views are valid until the next read.
func (rd *Reader) PeekBulks3() (a, b, c []byte, size int, ok bool) {
	buf, _ := rd.r.Peek(rd.r.Buffered()) // never reads: at most Buffered
	if len(buf) < 4 || buf[0] != '*' || buf[1] != '3' || buf[2] != '\r' || buf[3] != '\n' {
		return nil, nil, nil, 0, false
	}
	var out [3][]byte
	i := 4
	for k := range out {
		if i >= len(buf) || buf[i] != '$' {
			return nil, nil, nil, 0, false
		}
		j, n := i+1, 0
		for ; j < len(buf) && j-i <= 10 && buf[j] >= '0' && buf[j] <= '9'; j++ {
			n = n*10 + int(buf[j]-'0')
		}
		if j == i+1 || j+1 >= len(buf) || buf[j] != '\r' || buf[j+1] != '\n' {
			return nil, nil, nil, 0, false
		}
		start := j + 2
		end := start + n
		if end+2 > len(buf) || buf[end] != '\r' || buf[end+1] != '\n' {
			return nil, nil, nil, 0, false
		}
		out[k] = buf[start:end:end]
		i = end + 2
	}
	return out[0], out[1], out[2], i, true
}

// Discard consumes n buffered bytes, such as an array PeekBulks3 found.
// The views PeekBulks3 returned stay valid until the next read.
func (rd *Reader) Discard(n int) {
	_, _ = rd.r.Discard(n)
}
