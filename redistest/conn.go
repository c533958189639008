package redistest

import (
	"context"
	"errors"
	"fmt"
	"strconv"

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

// Info runs INFO <section> on the held connection and returns its fields,
// as Server.Info does.
func (c *Conn) Info(ctx context.Context, section string) (map[string]string, error) {
	reply, err := c.Do(ctx, "INFO", section)
	if err != nil {
		return nil, fmt.Errorf("redistest: INFO %s: %w", section, err)
	}
	text, ok := reply.(string)
	if !ok {
		return nil, fmt.Errorf("%w: INFO answered %T", ErrProtocol, reply)
	}
	return parseInfo(text), nil
}

// ClientsOpen returns how many connections count against the server's
// maxclients now: its clients (this one included) and, on a cluster node,
// its cluster bus links.
func (c *Conn) ClientsOpen(ctx context.Context) (int, error) {
	info, err := c.Info(ctx, "clients")
	if err != nil {
		return 0, err
	}
	return infoInts(info, "connected_clients", "cluster_connections")
}

// RejectedConnections returns how many connections the server refused at
// maxclients since it started.
func (c *Conn) RejectedConnections(ctx context.Context) (int, error) {
	info, err := c.Info(ctx, "stats")
	if err != nil {
		return 0, err
	}
	return infoInts(info, "rejected_connections")
}

// SetMaxClients sets the server's maxclients. Redis takes a value below
// the connections already open: it keeps them and refuses new ones until
// enough have closed.
func (c *Conn) SetMaxClients(ctx context.Context, n int) error {
	_, err := c.Do(ctx, "CONFIG", "SET", "maxclients", strconv.Itoa(n))
	return err
}

// infoInts returns the sum of integer INFO fields.
func infoInts(info map[string]string, fields ...string) (int, error) {
	sum := 0
	for _, f := range fields {
		n, err := strconv.Atoi(info[f])
		if err != nil {
			return 0, fmt.Errorf("%w: INFO field %s = %q", ErrProtocol, f, info[f])
		}
		sum += n
	}
	return sum, nil
}
