package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"time"

	"github.com/shardcast/shardcast/internal/resp"
	"github.com/shardcast/shardcast/internal/subconn"
)

// nodeConn is one plain request/reply connection to one Redis node, for
// the administrative commands inspect and key send (CLUSTER SLOTS, INFO,
// CLIENT LIST). It is not safe for concurrent use.
type nodeConn struct {
	addr    string
	nc      net.Conn
	rd      *resp.Reader
	buf     []byte
	timeout time.Duration
}

// dialNode connects to d.Addr and logs in, bounded by ctx and d.Timeout;
// d.Timeout (when set) also bounds each later command.
func dialNode(ctx context.Context, d subconn.Dialer) (*nodeConn, error) {
	nc, err := d.Dial(ctx)
	if err != nil {
		return nil, fmt.Errorf("%s: cannot connect: %w", d.Addr, err)
	}
	if err := d.Login(ctx, nc); err != nil {
		_ = nc.Close()
		return nil, fmt.Errorf("%s: login: %w", d.Addr, err)
	}
	return &nodeConn{addr: d.Addr, nc: nc, rd: resp.NewReader(bufio.NewReader(nc)), timeout: d.Timeout}, nil
}

// do sends one command and returns its reply (see resp.Reader.Reply); an
// error reply is returned as a *resp.ServerError error. A failed read or
// write leaves the connection unusable.
func (c *nodeConn) do(ctx context.Context, args ...string) (any, error) {
	var deadline time.Time // zero: none
	if c.timeout > 0 {
		deadline = time.Now().Add(c.timeout)
	}
	if d, ok := ctx.Deadline(); ok && (deadline.IsZero() || d.Before(deadline)) {
		deadline = d
	}
	_ = c.nc.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = c.nc.SetDeadline(time.Now()) })
	defer stop()
	c.buf = resp.AppendCommand(c.buf[:0], args[0], args[1:])
	if _, err := c.nc.Write(c.buf); err != nil {
		return nil, c.fail(ctx, args[0], err)
	}
	reply, err := c.rd.Reply()
	if err != nil {
		return nil, c.fail(ctx, args[0], err)
	}
	if se, ok := reply.(*resp.ServerError); ok {
		return nil, fmt.Errorf("%s: %s: %w", c.addr, args[0], se)
	}
	return reply, nil
}

func (c *nodeConn) fail(ctx context.Context, verb string, err error) error {
	if ctx.Err() != nil {
		err = ctx.Err()
	}
	return fmt.Errorf("%s: %s: %w", c.addr, verb, err)
}

// text runs a command whose reply is one string (INFO, CLIENT LIST,
// CLUSTER NODES).
func (c *nodeConn) text(ctx context.Context, args ...string) (string, error) {
	reply, err := c.do(ctx, args...)
	if err != nil {
		return "", err
	}
	s, ok := reply.(string)
	if !ok {
		return "", fmt.Errorf("%s: %s answered %T, want a string", c.addr, args[0], reply)
	}
	return s, nil
}

func (c *nodeConn) close() { _ = c.nc.Close() }
