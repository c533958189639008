package cluster

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/agreement"
	"github.com/shardcast/shardcast/internal/engine"
	"github.com/shardcast/shardcast/internal/pubconn"
	"github.com/shardcast/shardcast/internal/resp"
)

// joinLayout checks the broker's partition count and prefix against the
// layout record in the cluster and registers the broker there, with a
// heartbeat until Close (see shardcast.Agreement).
func (b *Broker) joinLayout() error {
	a := b.cfg.Agreement.WithDefaults()
	if a.Off {
		return nil
	}
	b.record = &recordConn{s: b.cfg}
	m, err := agreement.Join(b.core.Ctx(), agreement.Config{
		Agreement: a,
		Run:       b.record.run,
		Where:     "the cluster of " + strings.Join(b.cfg.seeds, ", "),
		Ours: shardcast.LayoutRecord{
			Fingerprint: b.layout.Fingerprint(),
			Description: fmt.Sprintf("cluster: %d partitions, prefix %q", b.layout.Partitions(), b.layout.Prefix()),
			Engine:      "cluster",
			Partitions:  b.layout.Partitions(),
			Prefix:      b.layout.Prefix(),
		},
		Timeout: b.cfg.Conn.CommandTimeout,
		Emit:    b.core.Emitter.Emit,
		Log:     b.core.Log,
	})
	if err != nil {
		return err
	}
	b.member = m
	m.Start(b.core.Ctx(), b.core.Go)
	return nil
}

// leaveLayout leaves the registry and closes the record's connection. It
// runs after the broker closed, so that Close cuts calls short first.
func (b *Broker) leaveLayout() {
	b.member.Leave()
	b.record.close()
}

// maxRecordRedirects bounds the MOVED replies one script call follows.
const maxRecordRedirects = 5

// recordConn runs the layout record's scripts on the master of the
// record's slot, over a connection of its own, so that they never queue
// behind publishes nor count in NodeStats. It finds that master by
// following MOVED from a seed; after a connection fails, the next attempt
// starts again from the next seed. Scripts run one at a time (New's join,
// then the heartbeats, then Close's leave); the mutex only keeps that
// safe if it ever changes. The scripts are idempotent, so resending one
// that may have run is harmless.
type recordConn struct {
	s    settings
	mu   sync.Mutex
	pub  *pubconn.Pub // nil until used, or after a failure
	addr string
	seed int // the seed to start from next
}

func (c *recordConn) run(ctx context.Context, s *shardcast.Script, keys, args []string) (any, error) {
	redirects, failures := 0, 0
	for {
		pub, addr := c.conn()
		v, err := engine.Eval(ctx, pub, s, keys, args)
		if err == nil {
			return v, nil
		}
		se, isReply := resp.IsServerError(err)
		switch {
		case isReply && strings.HasPrefix(se.Msg, "MOVED ") && redirects < maxRecordRedirects:
			redirects++
			c.reset(pub, movedTo(se.Msg, addr))
		case !isReply && ctx.Err() == nil && failures < len(c.s.seeds):
			failures++
			c.reset(pub, "")
		case !isReply:
			c.reset(pub, "")
			return nil, err
		default:
			return nil, err
		}
	}
}

// conn returns the connection to use, dialling a seed when there is none.
func (c *recordConn) conn() (*pubconn.Pub, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pub == nil {
		c.addr = c.s.seeds[c.seed%len(c.s.seeds)]
		c.pub = pubconn.New(c.s.dialer(c.addr), engine.PubTimeouts(c.s.Conn))
	}
	return c.pub, c.addr
}

// reset replaces the failed connection pub by one to addr, or, with addr
// empty, by none: the next call starts at the next seed.
func (c *recordConn) reset(pub *pubconn.Pub, addr string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pub != pub {
		return
	}
	pub.Close()
	c.pub = nil
	if addr == "" {
		c.seed++
		return
	}
	c.addr, c.pub = addr, pubconn.New(c.s.dialer(addr), engine.PubTimeouts(c.s.Conn))
}

func (c *recordConn) close() {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pub != nil {
		c.pub.Close()
		c.pub = nil
	}
}

// movedTo returns the node a "MOVED slot host:port" reply names; an empty
// host (a node that does not know its own address) means from's host.
func movedTo(msg, from string) string {
	f := strings.Fields(msg)
	if len(f) != 3 {
		return ""
	}
	host, port, err := net.SplitHostPort(f[2])
	if err != nil {
		return ""
	}
	if host == "" {
		host, _, _ = net.SplitHostPort(from)
	}
	return net.JoinHostPort(host, port)
}
