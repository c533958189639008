package main

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/redis/rueidis"
	"github.com/shardcast/shardcast"
)

// nodeDialer says how to reach one Redis node: its endpoint (as the
// engines parse the address) and the bound on the dial, the login and
// each command.
type nodeDialer struct {
	shardcast.Endpoint
	Timeout time.Duration
}

// newDialer returns how to reach addr (host:port or a URL) under conn.
func newDialer(addr string, conn shardcast.ConnOptions) (nodeDialer, error) {
	e, err := shardcast.ParseAddr(addr, conn)
	return nodeDialer{Endpoint: e, Timeout: conn.DialTimeout}, err
}

// at returns d for the node at addr, with the same login.
func (d nodeDialer) at(addr string) nodeDialer {
	d.Addr = addr
	return d
}

// nodeConn is one plain request/reply connection to one Redis node, for
// the administrative commands of inspect and key (CLUSTER SLOTS, CLUSTER
// NODES, INFO, CLIENT LIST). It is one rueidis connection speaking
// RESP2: the replies are parsed as the text and arrays RESP2 gives (RESP3
// would prefix INFO, CLIENT LIST and CLUSTER NODES with "txt:"), and it
// counts as one client in the node's connected_clients, which inspect
// leaves out.
type nodeConn struct {
	addr    string
	c       rueidis.Client
	timeout time.Duration
}

// dialNode connects to d.Addr and logs in, bounded by d.Timeout (the
// dial takes no ctx: one that already ended fails at once); d.Timeout,
// when set, also bounds each later command.
func dialNode(ctx context.Context, d nodeDialer) (*nodeConn, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%s: cannot connect: %w", d.Addr, err)
	}
	c, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress: []string{d.Addr},
		Username:    d.Username, Password: d.Password, TLSConfig: d.TLS,
		Dialer:            net.Dialer{Timeout: d.Timeout},
		ConnWriteTimeout:  d.Timeout,
		ForceSingleClient: true,
		PipelineMultiplex: -1, // one connection
		DisableCache:      true,
		DisableRetry:      true,
		AlwaysRESP2:       true,
		ClientSetInfo:     rueidis.DisableClientSetInfo,
	})
	if err != nil {
		if c != nil {
			c.Close()
		}
		return nil, fmt.Errorf("%s: cannot connect: %w", d.Addr, err)
	}
	return &nodeConn{addr: d.Addr, c: c, timeout: d.Timeout}, nil
}

// do sends one command and returns its reply, decoded as strings, int64,
// nil and []any; an error reply is returned as an error that names the
// node and the command.
func (c *nodeConn) do(ctx context.Context, args ...string) (any, error) {
	if c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	reply, err := c.c.Do(ctx, c.c.B().Arbitrary(args...).Build()).ToAny()
	if err != nil {
		return nil, fmt.Errorf("%s: %s: %w", c.addr, args[0], err)
	}
	return reply, nil
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

func (c *nodeConn) close() { c.c.Close() }
