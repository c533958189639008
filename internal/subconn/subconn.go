// Package subconn is one connection used only for Pub/Sub subscriptions,
// classic (SUBSCRIBE) or sharded (SSUBSCRIBE).
//
// It speaks RESP2 on a socket of its own instead of borrowing a rueidis
// dedicated connection: the read loop is the hottest path of a subscriber
// node, and owning it lets a message go from the socket buffer to the
// OnMessage hook without an allocation (the channel name and the payload
// are views of the connection's buffers; the hook copies what it keeps).
//
// On top of the wire it gives the engines what they need: a Done channel
// that closes when the wire is gone, pipelined batches of subscribe commands
// that return once Redis confirmed every channel, and the separation of
// server-pushed unsubscribe notices (a slot moved away) from the replies to
// the connection's own unsubscribe commands.
package subconn

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardcast/shardcast/internal/resp"
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
// block, must not issue commands and must not call Close (which waits for
// that goroutine).
type Hooks struct {
	// OnMessage receives every message: the wire channel name and the
	// payload, both views of the connection's buffers, valid only during
	// the call (copy what must outlive it; a string kept from channel
	// would change under the caller).
	OnMessage func(channel string, payload []byte)
	// OnLost receives a channel the server unsubscribed on its own, without
	// a matching unsubscribe command from this connection: in a cluster this
	// means the channel's slot moved to another node.
	OnLost func(channel string)
	// OnIdle, when set, is called each time the reader has consumed
	// everything it read and is about to wait for more from the socket:
	// the moment to pass on work batched from the messages before it.
	OnIdle func()
}

// Dialer says how to reach and authenticate to one Redis node.
type Dialer struct {
	// Addr is host:port.
	Addr string
	// Username and Password are sent with AUTH when Password is set
	// (Username empty means the default user).
	Username string
	Password string
	// TLS, when set, wraps the socket; an empty ServerName is taken from
	// Addr.
	TLS *tls.Config
	// Timeout bounds the TCP (and TLS) dial on top of Open's context; zero
	// leaves it to the context.
	Timeout time.Duration
	// ReadOnly sends READONLY after the login: a cluster replica serves
	// SSUBSCRIBE only on a connection that did (a master ignores it).
	ReadOnly bool
	// Master makes the login check with ROLE that the node is a master,
	// and fail with ErrNotMaster otherwise: a node Sentinel named a
	// moment ago may have been demoted since, and a replica takes a
	// PUBLISH that reaches only its own subscribers.
	Master bool
	// Resolve, when set, gives the host:port to dial at each Dial (the
	// master Sentinel names now); Addr then only names the node in
	// messages.
	Resolve func(ctx context.Context) (string, error)
}

// ErrNotMaster is the login's error on a node that is not a master while
// Dialer.Master is set.
var ErrNotMaster = errors.New("subconn: the node is not a master")

// ErrClosed is returned by commands on a connection after Close.
var ErrClosed = errors.New("subconn: connection closed")

type callKind uint8

const (
	callSubscribe   callKind = iota // answered by one confirmation per channel
	callUnsubscribe                 // likewise, then the pong of the PING sent behind it
	callPing                        // +PONG, or ["pong", ""] once subscribed
)

// call is one command waiting for its reply. next and err are written only
// by the reader goroutine, before done closes.
type call struct {
	kind   callKind
	prefix string // each of chans goes on the wire as prefix+channel
	chans  []string
	next   int
	err    error
	done   chan struct{}
}

// Conn is one subscribe connection. Its methods are safe for concurrent use.
type Conn struct {
	nc    net.Conn
	mode  Mode
	hooks Hooks

	// wlock, a one-slot semaphore, serialises writes (queue order is
	// write order); a waiter gives up when its ctx ends or the wire goes,
	// so that a write blocked on a frozen server holds up no Ping.
	wlock chan struct{}

	qmu   sync.Mutex
	queue []*call // sent, not yet answered, in send order
	dead  bool    // set once the reader has failed the queue

	// chanBuf holds the channel name of the message being read: the read
	// buffer may move under it while the payload is peeked. Only the
	// reader goroutine touches it.
	chanBuf []byte

	mu   sync.Mutex
	err  error
	werr error // why a write failed, when that failure closed the wire

	done       chan struct{} // closed when the wire is gone
	readerDone chan struct{} // closed when the reader goroutine exits
	closeOnce  sync.Once
	// closing is set when Close starts. From then on the hooks are not
	// called: a server that wakes up while a frozen wire is being closed
	// (a SIGSTOPped master that lost its slots meanwhile) would otherwise
	// deliver, on a wire the caller already gave up, messages the caller now
	// receives elsewhere.
	closing atomic.Bool

	// reads counts the replies and pushes the reader has begun: a ping
	// that is late while it grows waits behind replies still arriving.
	reads atomic.Uint64
}

// readBufferSize is the socket read buffer; a payload that fits is handed
// to OnMessage without a copy.
const readBufferSize = 64 << 10

// Open dials d, authenticates when d has a password, and checks the wire
// with a PING, all bounded by ctx.
func Open(ctx context.Context, d Dialer, mode Mode, hooks Hooks) (*Conn, error) {
	nc, err := d.Dial(ctx)
	if err != nil {
		return nil, fmt.Errorf("subconn: dial %s: %w", d.Addr, err)
	}
	if err := d.Login(ctx, nc); err != nil {
		_ = nc.Close()
		return nil, fmt.Errorf("subconn: auth on %s: %w", d.Addr, err)
	}
	c := newConn(nc, mode, hooks)
	if err := c.Ping(ctx); err != nil {
		c.Close()
		return nil, fmt.Errorf("subconn: ping %s: %w", d.Addr, err)
	}
	return c, nil
}

// newConn wraps nc and starts its reader goroutine.
func newConn(nc net.Conn, mode Mode, hooks Hooks) *Conn {
	c := &Conn{
		nc:         nc,
		mode:       mode,
		hooks:      hooks,
		done:       make(chan struct{}),
		readerDone: make(chan struct{}),
		wlock:      make(chan struct{}, 1),
	}
	go c.read()
	return c
}

// Dial opens a TCP (or TLS) connection to d.Addr, or to the address
// d.Resolve gives, bounded by ctx and d.Timeout.
func (d Dialer) Dial(ctx context.Context) (net.Conn, error) {
	addr := d.Addr
	if d.Resolve != nil {
		var err error
		if addr, err = d.Resolve(ctx); err != nil {
			return nil, err
		}
	}
	nd := &net.Dialer{Timeout: d.Timeout, KeepAlive: 15 * time.Second}
	if d.TLS == nil {
		return nd.DialContext(ctx, "tcp", addr)
	}
	cfg := d.TLS
	if cfg.ServerName == "" {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		cfg = cfg.Clone()
		cfg.ServerName = host
	}
	td := &tls.Dialer{NetDialer: nd, Config: cfg}
	return td.DialContext(ctx, "tcp", addr)
}

// Login authenticates nc when d has a password or a username (an ACL
// user without a password, "nopass", takes any: AUTH user ""), bounded by
// ctx and d.Timeout: the dial timeout covers the login too, so that a
// server that accepts connections but never answers (a frozen Redis)
// cannot hold a caller whose ctx has no deadline. With ReadOnly it then
// sends READONLY, and with Master it checks the node's ROLE.
func (d Dialer) Login(ctx context.Context, nc net.Conn) error {
	login := d.Password != "" || d.Username != ""
	if !login && !d.ReadOnly && !d.Master {
		return nil
	}
	if d.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d.Timeout)
		defer cancel()
	}
	if login {
		if err := resp.Auth(ctx, nc, d.Username, d.Password); err != nil {
			return err
		}
	}
	if d.ReadOnly {
		if err := resp.ExpectOK(ctx, nc, "READONLY", nil); err != nil {
			return fmt.Errorf("READONLY: %w", err)
		}
	}
	if d.Master {
		return checkMaster(ctx, nc)
	}
	return nil
}

// checkMaster asks the node its ROLE and returns ErrNotMaster unless it is
// a master. A user not allowed ROLE (NOPERM) is let through unchecked:
// the broker then relies on Sentinel's word alone.
func checkMaster(ctx context.Context, nc net.Conn) error {
	v, err := resp.Exchange(ctx, nc, "ROLE", nil)
	if se, ok := resp.IsServerError(err); ok && strings.HasPrefix(se.Msg, "NOPERM") {
		return nil
	}
	if err != nil {
		return fmt.Errorf("ROLE: %w", err)
	}
	if arr, ok := v.([]any); ok && len(arr) > 0 {
		if role, _ := arr[0].(string); role != "master" {
			return fmt.Errorf("%w (ROLE says %s)", ErrNotMaster, role)
		}
		return nil
	}
	return fmt.Errorf("%w: ROLE answered %v", resp.ErrProtocol, v)
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
// one error per batch (nil when Redis confirmed every channel of it). Redis
// executes a subscribe command as a whole before it pushes the first
// confirmation. In Sharded mode every batch must hold channels of a single
// slot.
func (c *Conn) Subscribe(ctx context.Context, batches ...[]string) []error {
	verb := "SUBSCRIBE"
	if c.mode == Sharded {
		verb = "SSUBSCRIBE"
	}
	return c.multi(ctx, callSubscribe, verb, nil, batches)
}

// SubscribePrefixed is Subscribe for batches whose channels go on the
// wire as prefixes[i]+channel: the cluster engine's keys, written into
// the command without building a string per key.
func (c *Conn) SubscribePrefixed(ctx context.Context, prefixes []string, batches [][]string) []error {
	if len(prefixes) != len(batches) {
		errs := make([]error, len(batches))
		for i := range errs {
			errs[i] = fmt.Errorf("subconn: %d prefixes for %d batches", len(prefixes), len(batches))
		}
		return errs
	}
	verb := "SUBSCRIBE"
	if c.mode == Sharded {
		verb = "SSUBSCRIBE"
	}
	return c.multi(ctx, callSubscribe, verb, prefixes, batches)
}

// Unsubscribe sends one unsubscribe command per batch, pipelined. The
// server's confirmations of these commands are not reported to OnLost.
func (c *Conn) Unsubscribe(ctx context.Context, batches ...[]string) []error {
	verb := "UNSUBSCRIBE"
	if c.mode == Sharded {
		verb = "SUNSUBSCRIBE"
	}
	return c.multi(ctx, callUnsubscribe, verb, nil, batches)
}

// Ping checks the wire with a PING bounded by ctx. A failure does not close
// the connection; the caller decides.
func (c *Conn) Ping(ctx context.Context) error {
	cl := &call{kind: callPing, done: make(chan struct{})}
	if err := c.lockWrite(ctx); err != nil {
		return err
	}
	err := c.send(ctx, pingCommand, cl)
	c.unlockWrite()
	if err != nil {
		return err
	}
	return c.wait(ctx, cl)
}

// Reads returns how many replies and pushes the wire has read so far. A
// ping that is overdue while the count still grows is queued behind
// replies the server is sending (a long pipeline of subscribe commands):
// the server is busy, not gone.
func (c *Conn) Reads() uint64 { return c.reads.Load() }

// Close closes the wire and waits for the reader goroutine to exit. Once
// Close has begun, hooks for newly read pushes are skipped (one already
// running may still finish). It is idempotent.
func (c *Conn) Close() {
	c.closing.Store(true)
	c.closeOnce.Do(func() {
		_ = c.nc.Close()
		<-c.readerDone
	})
}

// multi sends one command of verb per non-empty batch, its channels each
// behind prefixes[k] (none when prefixes is nil), in one write.
func (c *Conn) multi(ctx context.Context, kind callKind, verb string, prefixes []string, batches [][]string) []error {
	errs := make([]error, len(batches))
	calls := make([]*call, 0, len(batches))
	if err := c.lockWrite(ctx); err != nil {
		for k := range errs {
			errs[k] = err
		}
		return errs
	}
	prefix := func(k int) string {
		if prefixes == nil {
			return ""
		}
		return prefixes[k]
	}
	size := 0
	for k, b := range batches {
		if len(b) > 0 {
			size += resp.CommandLen(verb, prefix(k), b)
			if kind == callUnsubscribe {
				size += resp.CommandLen("PING", "", nil)
			}
		}
	}
	bp := writeBufs.Get().(*[]byte)
	buf := slices.Grow((*bp)[:0], size)
	for k, b := range batches {
		if len(b) == 0 {
			continue // Redis would answer a bare (UN)SUBSCRIBE differently
		}
		calls = append(calls, &call{kind: kind, prefix: prefix(k), chans: b, done: make(chan struct{})})
		buf = resp.AppendPrefixed(buf, verb, prefix(k), b)
		if kind == callUnsubscribe {
			buf = append(buf, pingCommand...) // ends the call (see readConfirmation)
		}
	}
	var err error
	if len(calls) > 0 {
		err = c.send(ctx, buf, calls...)
	}
	c.unlockWrite()
	if cap(buf) <= maxPooledWrite {
		*bp = buf[:0]
		writeBufs.Put(bp)
	}
	i := 0
	for k, b := range batches {
		if len(b) == 0 {
			continue
		}
		if err != nil {
			errs[k] = err
		} else {
			errs[k] = c.wait(ctx, calls[i])
		}
		i++
	}
	return errs
}

// lockWrite takes the write lock, waiting at most until ctx ends or the
// wire is gone.
func (c *Conn) lockWrite(ctx context.Context) error {
	select {
	case c.wlock <- struct{}{}:
		return nil
	default:
	}
	select {
	case c.wlock <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-c.done:
		if c.closing.Load() {
			return ErrClosed
		}
		return c.Err()
	}
}

func (c *Conn) unlockWrite() { <-c.wlock }

// writeBufs holds the buffers multi builds its commands in. A connection
// writes (un)subscribe commands rarely and in bursts: after a reconnect
// storm hundreds of connections each growing a buffer of their own would
// fault in and zero that memory again, and keep it while idle. Shared, a
// few buffers serve them all.
var writeBufs = sync.Pool{New: func() any { return new([]byte) }}

// maxPooledWrite is the largest buffer writeBufs keeps: a resubscribe of
// a million channels need not stay resident.
const maxPooledWrite = 1 << 20

// pingCommand is PING as written on the wire; never modified.
var pingCommand = resp.AppendCommand(nil, "PING", nil)

// send queues calls and writes buf; the caller holds the write lock.
// A write that fails (or that ctx interrupts) leaves the stream in an
// unknown state, so it closes the wire; the queued calls then fail with
// the write's error as the wire's cause.
func (c *Conn) send(ctx context.Context, buf []byte, calls ...*call) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.qmu.Lock()
	if c.dead {
		c.qmu.Unlock()
		return c.Err()
	}
	c.queue = append(c.queue, calls...)
	c.qmu.Unlock()
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		_ = c.nc.SetWriteDeadline(time.Now())
		close(fired)
	})
	_, err := c.nc.Write(buf)
	if !stop() {
		// ctx ended during the write: clear the deadline it set (the wire
		// is about to close anyway if the write failed). The func runs on
		// a goroutine of its own and may not have set it yet: clearing
		// first would leave a past deadline that fails the next write.
		<-fired
		_ = c.nc.SetWriteDeadline(time.Time{})
	}
	if err != nil {
		ctxErr := ctx.Err()
		if ctxErr != nil {
			err = ctxErr
		}
		// Recorded before the close, as the cause the reader reports to
		// everyone else, unless the reader failed first.
		c.mu.Lock()
		if c.err == nil && c.werr == nil {
			c.werr = fmt.Errorf("subconn: write: %w", err)
		}
		c.mu.Unlock()
		_ = c.nc.Close()
		if ctxErr != nil {
			return ctxErr
		}
		if c.closing.Load() {
			return ErrClosed
		}
		if cause := c.Err(); cause != nil {
			// The reader closed the wire first, for a reason of its own:
			// the server's refusal at maxclients, read before this
			// command was queued, is the one that matters.
			return cause
		}
		return fmt.Errorf("subconn: write: %w", err)
	}
	return nil
}

func (c *Conn) wait(ctx context.Context, cl *call) error {
	select {
	case <-cl.done:
		return cl.err
	case <-ctx.Done():
		return ctx.Err()
	}
}
