package redistest

import (
	"context"
	"errors"

	"github.com/shardcast/shardcast/internal/resp"
)

// Conn is a connection to a server that a test holds across commands:
// an admin connection that must keep working while the server refuses
// new ones (maxclients), or connections that only take up client slots.
// Server.Do opens a fresh connection per call instead. A Conn is not safe
// for concurrent use; after an I/O error it is unusable.
type Conn struct {
	c *respConn
}

// Dial opens a Conn to s, over TLS when s was started WithTLS, and checks
// with a PING that the server took it. A server at maxclients accepts the
// socket, sends an error and closes it: Dial then returns that error (a
// *resp.ServerError, "ERR max number of clients reached"). The caller
// closes the Conn; it holds no goroutine.
func (s *Server) Dial(ctx context.Context) (*Conn, error) {
	rc, err := s.dial(ctx)
	if err != nil {
		return nil, err
	}
	c := &Conn{c: rc}
	if _, err := c.Do(ctx, "PING"); err != nil {
		_ = rc.close()
		return nil, err
	}
	return c, nil
}

// Do runs one command and returns its reply, shaped as Server.Do's. An
// error reply is returned as a *resp.ServerError error, and leaves the
// connection usable.
func (c *Conn) Do(ctx context.Context, args ...string) (any, error) {
	if len(args) == 0 {
		return nil, errors.New("redistest: empty command")
	}
	replies, err := c.c.do(ctx, args)
	if err != nil {
		return nil, err
	}
	if rerr, ok := replies[0].(*resp.ServerError); ok {
		return nil, rerr
	}
	return replies[0], nil
}

// Close closes the connection.
func (c *Conn) Close() error { return c.c.close() }
