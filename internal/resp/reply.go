package resp

import (
	"fmt"
	"strconv"
)

// maxDepth bounds the nesting of arrays Reply decodes; Redis replies nest
// a few levels, and a hostile stream must not exhaust the stack.
const maxDepth = 64

// Reply reads one whole value and returns it as Go values: simple and bulk
// strings as string, integers as int64, the null bulk string and the null
// array as nil, arrays as []any and error replies as *ServerError (a value,
// not the error: the caller decides what a refusal means). It allocates
// what it returns, and only as the bytes arrive, whatever length a header
// claims.
func (rd *Reader) Reply() (any, error) {
	return rd.reply(0)
}

func (rd *Reader) reply(depth int) (any, error) {
	// A bulk string goes through Bulk, which reads its own header, so the
	// two share one bulk decoder.
	if kind, err := rd.r.Peek(1); err == nil && kind[0] == '$' {
		b, null, err := rd.Bulk()
		if err != nil || null {
			return nil, err
		}
		return string(b), nil
	}
	line, err := rd.Line()
	if err != nil {
		return nil, err
	}
	body := line[1:]
	switch line[0] {
	case '+':
		return string(body), nil
	case '-':
		return &ServerError{Msg: string(body)}, nil
	case ':':
		n, err := strconv.ParseInt(string(body), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%w: bad integer %q", ErrProtocol, body)
		}
		return n, nil
	case '*':
		n, err := parseLen(line)
		if err != nil || n < 0 {
			return nil, err
		}
		if depth == maxDepth {
			return nil, fmt.Errorf("%w: arrays nested deeper than %d", ErrProtocol, maxDepth)
		}
		// Grown by append, not made at n: n is the peer's claim.
		arr := make([]any, 0, min(n, 64))
		for range n {
			v, err := rd.reply(depth + 1)
			if err != nil {
				return nil, err
			}
			arr = append(arr, v)
		}
		return arr, nil
	default:
		return nil, fmt.Errorf("%w: unexpected type byte %q", ErrProtocol, line[0])
	}
}
