package redistest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"time"
)

// The harness speaks RESP2 over plain TCP itself instead of using rueidis:
// a connection per call leaves no background goroutine behind (callers run
// goleak), works against a node that is paused or half-configured, and keeps
// the harness independent of the client library it is used to test.

// RedisError is an error reply sent by Redis, such as "MOVED 3999 127.0.0.1:6381"
// or "CLUSTERDOWN The cluster is down". Do returns it as the error for a
// top-level error reply; inside an array it appears as an element value.
type RedisError string

// Error returns the reply text without the leading '-'.
func (e RedisError) Error() string { return string(e) }

// ErrProtocol reports a reply that is not valid RESP2.
var ErrProtocol = errors.New("redistest: RESP protocol error")

// defaultCallTimeout bounds a call whose context has no deadline, so that a
// paused (SIGSTOPped) server cannot hang a test forever.
const defaultCallTimeout = 10 * time.Second

// Limits that keep a corrupt reply from making the reader allocate without bound.
const (
	maxBulkLen  = 512 << 20
	maxArrayLen = 1 << 24
)

// respConn is one RESP2 connection. It is not safe for concurrent use.
type respConn struct {
	nc net.Conn
	br *bufio.Reader
	bw *bufio.Writer
}

// dialRESP connects to addr, bounded by ctx (or defaultCallTimeout).
func dialRESP(ctx context.Context, addr string) (*respConn, error) {
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("redistest: dial %s: %w", addr, ctxErr(ctx, err))
	}
	return &respConn{nc: nc, br: bufio.NewReader(nc), bw: bufio.NewWriter(nc)}, nil
}

func withDefaultTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, defaultCallTimeout)
}

// close closes the connection.
func (c *respConn) close() error { return c.nc.Close() }

// guard applies ctx to the connection's I/O: its deadline (or the default
// timeout) becomes the socket deadline, and a cancellation unblocks the I/O.
// The returned function must be called when the I/O is over.
func (c *respConn) guard(ctx context.Context) (release func()) {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(defaultCallTimeout)
	}
	_ = c.nc.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = c.nc.SetDeadline(time.Unix(1, 0)) })
	return func() { stop() }
}

// do sends every command in one write (pipelined) and reads one reply per
// command. Error replies are returned as RedisError values in the slice, not
// as the error: the error reports only I/O and protocol failures, after which
// the connection must be closed.
func (c *respConn) do(ctx context.Context, cmds ...[]string) ([]any, error) {
	release := c.guard(ctx)
	defer release()
	for _, cmd := range cmds {
		writeCommand(c.bw, cmd)
	}
	if err := c.bw.Flush(); err != nil {
		return nil, fmt.Errorf("redistest: write to %s: %w", c.nc.RemoteAddr(), ctxErr(ctx, err))
	}
	replies := make([]any, len(cmds))
	for i := range cmds {
		v, err := readReply(c.br)
		if err != nil {
			return nil, fmt.Errorf("redistest: read from %s: %w", c.nc.RemoteAddr(), ctxErr(ctx, err))
		}
		replies[i] = v
	}
	return replies, nil
}

// receive reads one more reply or pushed message (a subscription push
// such as a server-sent sunsubscribe).
func (c *respConn) receive(ctx context.Context) (any, error) {
	release := c.guard(ctx)
	defer release()
	v, err := readReply(c.br)
	if err != nil {
		return nil, fmt.Errorf("redistest: read from %s: %w", c.nc.RemoteAddr(), ctxErr(ctx, err))
	}
	return v, nil
}

// ctxErr prefers the context's error over the socket timeout it caused, so
// callers can branch on context.DeadlineExceeded / context.Canceled.
func ctxErr(ctx context.Context, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("%w (%v)", ctxErr, err)
	}
	// The socket deadline is the ctx deadline, and it can fire a moment
	// before the context's own timer marks ctx as done.
	if deadline, ok := ctx.Deadline(); ok && errors.Is(err, os.ErrDeadlineExceeded) && !time.Now().Before(deadline) {
		return fmt.Errorf("%w (%v)", context.DeadlineExceeded, err)
	}
	return err
}

// writeCommand encodes cmd as a RESP array of bulk strings.
func writeCommand(w *bufio.Writer, cmd []string) {
	w.WriteByte('*')
	w.WriteString(strconv.Itoa(len(cmd)))
	w.WriteString("\r\n")
	for _, arg := range cmd {
		w.WriteByte('$')
		w.WriteString(strconv.Itoa(len(arg)))
		w.WriteString("\r\n")
		w.WriteString(arg)
		w.WriteString("\r\n")
	}
}

// readReply decodes one RESP2 value: simple and bulk strings become string,
// integers int64, null bulk strings and arrays nil, arrays []any and error
// replies RedisError.
func readReply(r *bufio.Reader) (any, error) {
	line, err := readLine(r)
	if err != nil {
		return nil, err
	}
	if len(line) == 0 {
		return nil, fmt.Errorf("%w: empty line", ErrProtocol)
	}
	body := line[1:]
	switch line[0] {
	case '+':
		return string(body), nil
	case '-':
		return RedisError(body), nil
	case ':':
		n, err := strconv.ParseInt(string(body), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%w: bad integer %q", ErrProtocol, body)
		}
		return n, nil
	case '$':
		n, err := parseLen(body, maxBulkLen)
		if err != nil || n < 0 {
			return nil, err
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		if buf[n] != '\r' || buf[n+1] != '\n' {
			return nil, fmt.Errorf("%w: bulk string not terminated by CRLF", ErrProtocol)
		}
		return string(buf[:n]), nil
	case '*':
		n, err := parseLen(body, maxArrayLen)
		if err != nil || n < 0 {
			return nil, err
		}
		arr := make([]any, n)
		for i := range arr {
			if arr[i], err = readReply(r); err != nil {
				return nil, err
			}
		}
		return arr, nil
	default:
		return nil, fmt.Errorf("%w: unexpected type byte %q", ErrProtocol, line[0])
	}
}

// parseLen parses a length header; -1 means null and yields (-1, nil).
func parseLen(b []byte, limit int) (int, error) {
	n, err := strconv.Atoi(string(b))
	if err != nil || n < -1 || n > limit {
		return 0, fmt.Errorf("%w: bad length %q", ErrProtocol, b)
	}
	return n, nil
}

// readLine reads one CRLF-terminated line and returns it without the CRLF.
func readLine(r *bufio.Reader) ([]byte, error) {
	line, err := r.ReadSlice('\n')
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			return nil, fmt.Errorf("%w: line too long", ErrProtocol)
		}
		return nil, err
	}
	if len(line) < 2 || line[len(line)-2] != '\r' {
		return nil, fmt.Errorf("%w: line not terminated by CRLF", ErrProtocol)
	}
	return line[:len(line)-2], nil
}
