// Package subconn wraps one dedicated rueidis connection used only for
// Pub/Sub subscriptions, classic (SUBSCRIBE) or sharded (SSUBSCRIBE).
//
// It adds what the engines need on top of rueidis: a Done channel that
// closes when the wire is gone, pipelined batches of subscribe commands, and
// the separation of server-pushed unsubscribe notices (a slot moved away)
// from the replies to the connection's own unsubscribe commands.
package subconn

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/redis/rueidis"
)

// Mode selects the command family a connection uses.
type Mode int

const (
	// Classic uses SUBSCRIBE / UNSUBSCRIBE and receives "message" pushes.
	Classic Mode = iota
	// Sharded uses SSUBSCRIBE / SUNSUBSCRIBE and receives "smessage" pushes.
	Sharded
)

// Hooks are called on the connection's reader goroutine: they must not
// block and must not issue commands.
type Hooks struct {
	// OnMessage receives every message. channel is the wire channel name.
	OnMessage func(channel, payload string)
	// OnLost receives a channel the server unsubscribed on its own, without
	// a matching unsubscribe command from this connection: in a cluster this
	// means the channel's slot moved to another node.
	OnLost func(channel string)
}

// ErrClosed is returned by commands on a connection after Close.
var ErrClosed = errors.New("subconn: connection closed")

// Conn is one subscribe connection. Its methods are safe for concurrent use.
type Conn struct {
	dc      rueidis.DedicatedClient
	release func()
	mode    Mode
	hooks   Hooks

	mu      sync.Mutex
	pending map[string]int // own unsubscribes not yet confirmed, by channel
	err     error

	done      chan struct{} // closed when the wire is gone
	watcher   chan struct{} // closed when the watch goroutine exits
	closeOnce sync.Once
	// closing is set when Close starts. From then on the hooks are not
	// called: closing a wire to an unresponsive server can take rueidis a
	// while, and a server that wakes up in that window (a SIGSTOPped master
	// that lost its slots meanwhile) would deliver, on a wire the caller
	// already gave up, messages the caller now receives elsewhere.
	closing atomic.Bool
}

// Open dedicates a new wire of node to subscriptions and checks that it is
// alive with a PING bounded by ctx.
func Open(ctx context.Context, node rueidis.Client, mode Mode, hooks Hooks) (*Conn, error) {
	dc, release := node.Dedicate()
	c := &Conn{
		dc:      dc,
		release: release,
		mode:    mode,
		hooks:   hooks,
		pending: make(map[string]int),
		done:    make(chan struct{}),
		watcher: make(chan struct{}),
	}
	errs := dc.SetPubSubHooks(rueidis.PubSubHooks{
		OnMessage:      c.onMessage,
		OnSubscription: c.onSubscription,
	})
	go c.watch(errs)
	if err := dc.Do(ctx, dc.B().Ping().Build()).Error(); err != nil {
		c.Close()
		return nil, fmt.Errorf("subconn: ping: %w", err)
	}
	return c, nil
}

func (c *Conn) watch(errs <-chan error) {
	defer close(c.watcher)
	err, ok := <-errs
	if !ok || err == nil {
		err = ErrClosed
	}
	c.mu.Lock()
	c.err = err
	c.mu.Unlock()
	close(c.done)
}

func (c *Conn) onMessage(m rueidis.PubSubMessage) {
	if c.hooks.OnMessage != nil && !c.closing.Load() {
		c.hooks.OnMessage(m.Channel, m.Message)
	}
}

func (c *Conn) onSubscription(s rueidis.PubSubSubscription) {
	if s.Kind != "unsubscribe" && s.Kind != "sunsubscribe" {
		return
	}
	c.mu.Lock()
	n, own := c.pending[s.Channel]
	if own {
		if n <= 1 {
			delete(c.pending, s.Channel)
		} else {
			c.pending[s.Channel] = n - 1
		}
	}
	c.mu.Unlock()
	if !own && c.hooks.OnLost != nil && !c.closing.Load() {
		c.hooks.OnLost(s.Channel)
	}
}

// Done is closed when the connection is gone, by error or by Close.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err returns why the connection is gone, or nil while it is up.
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Alive reports whether the wire is still up.
func (c *Conn) Alive() bool {
	select {
	case <-c.done:
		return false
	default:
		return true
	}
}

// Subscribe sends one subscribe command per batch, pipelined, and returns
// one error per batch (nil when Redis confirmed it). A confirmed command
// means the server subscribed every channel of it: Redis executes a
// subscribe command as a whole before it pushes the first confirmation.
// In Sharded mode every batch must hold channels of a single slot.
func (c *Conn) Subscribe(ctx context.Context, batches ...[]string) []error {
	return c.do(ctx, batches, c.subscribeCmd)
}

// Unsubscribe sends one unsubscribe command per batch, pipelined. The
// server's confirmations of these commands are not reported to OnLost.
func (c *Conn) Unsubscribe(ctx context.Context, batches ...[]string) []error {
	c.mu.Lock()
	for _, b := range batches {
		for _, ch := range b {
			c.pending[ch]++
		}
	}
	c.mu.Unlock()
	errs := c.do(ctx, batches, c.unsubscribeCmd)
	// A command that failed before Redis ran it produces no confirmation:
	// forget those so that a later server-pushed notice is not swallowed.
	c.mu.Lock()
	for i, err := range errs {
		if err == nil || !confirmationLost(err, c.Alive()) {
			continue
		}
		for _, ch := range batches[i] {
			if n := c.pending[ch]; n <= 1 {
				delete(c.pending, ch)
			} else {
				c.pending[ch] = n - 1
			}
		}
	}
	c.mu.Unlock()
	return errs
}

// confirmationLost reports whether a failed unsubscribe command can no
// longer produce confirmations: Redis rejected it, or the wire is gone. A
// command abandoned by its context on a live wire may still be sent.
func confirmationLost(err error, alive bool) bool {
	if _, isRedis := rueidis.IsRedisErr(err); isRedis {
		return true
	}
	return !alive
}

func (c *Conn) subscribeCmd(channels []string) rueidis.Completed {
	if c.mode == Sharded {
		return c.dc.B().Ssubscribe().Channel(channels...).Build()
	}
	return c.dc.B().Subscribe().Channel(channels...).Build()
}

func (c *Conn) unsubscribeCmd(channels []string) rueidis.Completed {
	if c.mode == Sharded {
		return c.dc.B().Sunsubscribe().Channel(channels...).Build()
	}
	return c.dc.B().Unsubscribe().Channel(channels...).Build()
}

func (c *Conn) do(ctx context.Context, batches [][]string, build func([]string) rueidis.Completed) []error {
	errs := make([]error, len(batches))
	if len(batches) == 0 {
		return errs
	}
	if !c.Alive() {
		err := c.Err()
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	cmds := make(rueidis.Commands, 0, len(batches))
	for _, b := range batches {
		cmds = append(cmds, build(b))
	}
	for i, r := range c.dc.DoMulti(ctx, cmds...) {
		errs[i] = r.Error()
	}
	return errs
}

// Close closes the wire and waits for the connection's goroutine to exit.
// Once Close has begun, hooks for newly read pushes are skipped (one
// already running may still finish). It is idempotent.
func (c *Conn) Close() {
	c.closing.Store(true)
	c.closeOnce.Do(func() {
		// Closing the wire first makes rueidis drop it instead of trying to
		// unsubscribe it for reuse, which would block on a frozen server.
		c.dc.Close()
		c.release()
		<-c.watcher
	})
}

// Ping checks the wire with a PING bounded by ctx. A failure does not close
// the connection; the caller decides.
func (c *Conn) Ping(ctx context.Context) error {
	if !c.Alive() {
		return c.Err()
	}
	return c.dc.Do(ctx, c.dc.B().Ping().Build()).Error()
}
