package redistest

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/shardcast/shardcast/internal/resp"
)

// The harness speaks RESP2 over plain TCP itself instead of using rueidis:
// a connection per call leaves no background goroutine behind (callers run
// goleak), works against a node that is paused or half-configured, and keeps
// the harness independent of the client library it is used to test.

// ErrProtocol is resp.ErrProtocol: the harness's replies that are not
// RESP2, or not the shape a command answers with, wrap it.
var ErrProtocol = resp.ErrProtocol

// defaultCallTimeout bounds a call whose context has no deadline, so that a
// paused (SIGSTOPped) server cannot hang a test forever.
const defaultCallTimeout = 10 * time.Second

// respConn is one RESP2 connection. It is not safe for concurrent use.
type respConn struct {
	nc   net.Conn
	rd   *resp.Reader
	wbuf []byte
}

// dial opens a harness connection to s: over TLS when s was started
// WithTLS.
func (s *Server) dial(ctx context.Context) (*respConn, error) {
	c, err := dialRESP(ctx, s.Addr(), s.tls)
	login := s.login.Load()
	if err != nil || login == nil {
		return c, err
	}
	replies, err := c.do(ctx, *login)
	if err == nil {
		if rerr, ok := replies[0].(*resp.ServerError); ok {
			err = fmt.Errorf("redistest: %s: AUTH: %w", s.Addr(), rerr)
		}
	}
	if err != nil {
		_ = c.close()
		return nil, err
	}
	return c, nil
}

// dialRESP connects to addr, over TLS when cfg is set, bounded by ctx (or
// defaultCallTimeout).
func dialRESP(ctx context.Context, addr string, cfg *tls.Config) (*respConn, error) {
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	var (
		nc  net.Conn
		err error
	)
	if cfg == nil {
		var d net.Dialer
		nc, err = d.DialContext(ctx, "tcp", addr)
	} else {
		// tls.Dialer takes the server name from addr.
		d := tls.Dialer{Config: cfg}
		nc, err = d.DialContext(ctx, "tcp", addr)
	}
	if err != nil {
		return nil, fmt.Errorf("redistest: dial %s: %w", addr, ctxErr(ctx, err))
	}
	return &respConn{nc: nc, rd: resp.NewReader(bufio.NewReader(nc))}, nil
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
// command. Error replies are returned as *resp.ServerError values in the
// slice, not as the error: the error reports only I/O and protocol
// failures, after which the connection must be closed.
func (c *respConn) do(ctx context.Context, cmds ...[]string) ([]any, error) {
	release := c.guard(ctx)
	defer release()
	c.wbuf = c.wbuf[:0]
	for _, cmd := range cmds {
		if len(cmd) == 0 {
			return nil, errors.New("redistest: empty command")
		}
		c.wbuf = resp.AppendCommand(c.wbuf, cmd[0], cmd[1:])
	}
	if _, err := c.nc.Write(c.wbuf); err != nil {
		return nil, fmt.Errorf("redistest: write to %s: %w", c.nc.RemoteAddr(), ctxErr(ctx, err))
	}
	replies := make([]any, len(cmds))
	for i := range cmds {
		v, err := c.rd.Reply()
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
	v, err := c.rd.Reply()
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

// ReadCommand reads one command as clients send it, an array of bulk
// strings, from r: what a fake server in a test reads.
func ReadCommand(r *bufio.Reader) ([]string, error) {
	rd := resp.NewReader(r)
	n, err := rd.ArrayHeader()
	if err != nil {
		return nil, err
	}
	cmd := make([]string, 0, max(n, 0))
	for range n {
		b, _, err := rd.Bulk()
		if err != nil {
			return nil, err
		}
		cmd = append(cmd, string(b))
	}
	return cmd, nil
}
