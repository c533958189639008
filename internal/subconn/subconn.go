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
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

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
}

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
	kind  callKind
	chans []string
	next  int
	err   error
	done  chan struct{}
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
	wbuf  []byte

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

// Dial opens a TCP (or TLS) connection to d.Addr, bounded by ctx and
// d.Timeout.
func (d Dialer) Dial(ctx context.Context) (net.Conn, error) {
	nd := &net.Dialer{Timeout: d.Timeout, KeepAlive: 15 * time.Second}
	if d.TLS == nil {
		return nd.DialContext(ctx, "tcp", d.Addr)
	}
	cfg := d.TLS
	if cfg.ServerName == "" {
		host, _, err := net.SplitHostPort(d.Addr)
		if err != nil {
			return nil, err
		}
		cfg = cfg.Clone()
		cfg.ServerName = host
	}
	td := &tls.Dialer{NetDialer: nd, Config: cfg}
	return td.DialContext(ctx, "tcp", d.Addr)
}

// Login authenticates nc when d has a password or a username (an ACL
// user without a password, "nopass", takes any: AUTH user ""), bounded by
// ctx and d.Timeout: the dial timeout covers the login too, so that a
// server that accepts connections but never answers (a frozen Redis)
// cannot hold a caller whose ctx has no deadline. A username alone was
// once ignored, and the connection ran as the default user.
func (d Dialer) Login(ctx context.Context, nc net.Conn) error {
	if d.Password == "" && d.Username == "" {
		return nil
	}
	if d.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d.Timeout)
		defer cancel()
	}
	return resp.Auth(ctx, nc, d.Username, d.Password)
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
	return c.multi(ctx, callSubscribe, verb, batches)
}

// Unsubscribe sends one unsubscribe command per batch, pipelined. The
// server's confirmations of these commands are not reported to OnLost.
func (c *Conn) Unsubscribe(ctx context.Context, batches ...[]string) []error {
	verb := "UNSUBSCRIBE"
	if c.mode == Sharded {
		verb = "SUNSUBSCRIBE"
	}
	return c.multi(ctx, callUnsubscribe, verb, batches)
}

// Ping checks the wire with a PING bounded by ctx. A failure does not close
// the connection; the caller decides.
func (c *Conn) Ping(ctx context.Context) error {
	cl := &call{kind: callPing, done: make(chan struct{})}
	if err := c.lockWrite(ctx); err != nil {
		return err
	}
	c.wbuf = resp.AppendCommand(c.wbuf[:0], "PING", nil)
	err := c.send(ctx, cl)
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

func (c *Conn) multi(ctx context.Context, kind callKind, verb string, batches [][]string) []error {
	errs := make([]error, len(batches))
	calls := make([]*call, 0, len(batches))
	if err := c.lockWrite(ctx); err != nil {
		for k := range errs {
			errs[k] = err
		}
		return errs
	}
	c.wbuf = c.wbuf[:0]
	for _, b := range batches {
		if len(b) == 0 {
			continue // Redis would answer a bare (UN)SUBSCRIBE differently
		}
		calls = append(calls, &call{kind: kind, chans: b, done: make(chan struct{})})
		c.wbuf = resp.AppendCommand(c.wbuf, verb, b)
		if kind == callUnsubscribe {
			c.wbuf = resp.AppendCommand(c.wbuf, "PING", nil) // ends the call (see readConfirmation)
		}
	}
	var err error
	if len(calls) > 0 {
		err = c.send(ctx, calls...)
	}
	if cap(c.wbuf) > 1<<20 {
		c.wbuf = nil // a resubscribe of a million channels need not stay resident
	}
	c.unlockWrite()
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

// send queues calls and writes c.wbuf; the caller holds the write lock.
// A write that fails (or that ctx interrupts) leaves the stream in an
// unknown state, so it closes the wire; the queued calls then fail with
// the write's error as the wire's cause.
func (c *Conn) send(ctx context.Context, calls ...*call) error {
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
	_, err := c.nc.Write(c.wbuf)
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

// read runs the read loop until the wire fails or is closed, then fails
// every queued call.
func (c *Conn) read() {
	defer close(c.readerDone)
	var src io.Reader = c.nc
	if c.hooks.OnIdle != nil {
		src = idleReader{c.nc, c.hooks.OnIdle}
	}
	rd := resp.NewReader(bufio.NewReaderSize(src, readBufferSize))
	err := c.readLoop(rd)
	if c.hooks.OnIdle != nil {
		c.hooks.OnIdle() // a reply cut short by the failure ends a batch too
	}
	if c.closing.Load() {
		err = ErrClosed
	}
	// The cause is recorded before the wire is closed: a write failing on
	// the closed wire then reports it (see send), not "use of closed
	// network connection".
	c.mu.Lock()
	if c.werr != nil && !c.closing.Load() && errors.Is(err, net.ErrClosed) {
		// The failed write closed the wire under the reader: its error is
		// the cause. (A reader that failed for a reason of its own, such
		// as the server's refusal at maxclients, keeps that one.)
		err = c.werr
	}
	c.err = err
	c.mu.Unlock()
	_ = c.nc.Close()
	c.qmu.Lock()
	c.dead = true
	queue := c.queue
	c.queue = nil
	c.qmu.Unlock()
	for _, cl := range queue {
		cl.err = err
		close(cl.done)
	}
	// Last, so that once Done is closed every command fails with Err.
	close(c.done)
}

// idleReader calls idle before every read from r: the buffered reader
// above it reads only once it has handed out everything it holds.
type idleReader struct {
	r    io.Reader
	idle func()
}

func (ir idleReader) Read(p []byte) (int, error) {
	ir.idle()
	return ir.r.Read(p)
}

func (c *Conn) readLoop(rd *resp.Reader) error {
	for {
		line, err := rd.Line()
		if err != nil {
			return err
		}
		c.reads.Add(1)
		switch line[0] {
		case '*':
			n, err := resp.ParseInt(line[1:])
			if err != nil {
				return err
			}
			if err := c.readPush(rd, n); err != nil {
				return err
			}
		case '+':
			if err := c.simple(line[1:]); err != nil {
				return err
			}
		case '-':
			if err := c.failed(&resp.ServerError{Msg: string(line[1:])}); err != nil {
				return err
			}
		default:
			return fmt.Errorf("%w: unexpected reply %q", resp.ErrProtocol, line)
		}
	}
}

// readPush handles one array of n elements: a message, a (un)subscribe
// confirmation or notice, or the pong of a subscribed connection.
func (c *Conn) readPush(rd *resp.Reader, n int) error {
	if n < 1 {
		return fmt.Errorf("%w: empty array", resp.ErrProtocol)
	}
	kind, null, err := rd.Bulk()
	if err != nil {
		return err
	}
	if null {
		return rd.Skip(n - 1)
	}
	// Classify while kind still points into the read buffer.
	const (
		other = iota
		message
		subscribed
		unsubscribed
		pong
	)
	what := other
	switch string(kind) {
	case "message", "smessage":
		what = message
	case "subscribe", "ssubscribe":
		what = subscribed
	case "unsubscribe", "sunsubscribe":
		what = unsubscribed
	case "pong":
		what = pong
	}
	switch {
	case n == 3 && what == message:
		return c.readMessage(rd)
	case n == 3 && what == subscribed:
		return c.readConfirmation(rd, true)
	case n == 3 && what == unsubscribed:
		return c.readConfirmation(rd, false)
	case n == 2 && what == pong:
		if err := rd.Skip(1); err != nil {
			return err
		}
		return c.pong()
	default: // pmessage and anything else this connection never asked for
		return rd.Skip(n - 1)
	}
}

func (c *Conn) readMessage(rd *resp.Reader) error {
	name, err := c.readChannel(rd)
	if err != nil {
		return err
	}
	payload, _, err := rd.Bulk()
	if err != nil {
		return err
	}
	if c.hooks.OnMessage != nil && !c.closing.Load() {
		c.hooks.OnMessage(name, payload)
	}
	return nil
}

// readChannel reads a channel name into c.chanBuf and returns a string
// view of it, valid until the next message.
func (c *Conn) readChannel(rd *resp.Reader) (string, error) {
	b, null, err := rd.Bulk()
	if err != nil || null {
		return "", err
	}
	c.chanBuf = append(c.chanBuf[:0], b...)
	return unsafe.String(unsafe.SliceData(c.chanBuf), len(c.chanBuf)), nil
}

// readConfirmation matches a (un)subscribe reply with the head of the
// queue: Redis answers a command with one confirmation per channel, in the
// command's order. A subscribe call is complete with its last
// confirmation. An unsubscribe call is complete only at the pong of the
// PING sent behind it: the server may drop a channel on its own (a slot
// moved away) just before running our unsubscribe of it, and then its
// notice is indistinguishable from our confirmation and our command is
// answered with an error instead (MOVED), which belongs to the same call.
// An unsubscribe notice no call is waiting for goes to OnLost.
func (c *Conn) readConfirmation(rd *resp.Reader, subscribe bool) error {
	ch, null, err := rd.Bulk()
	if err != nil {
		return err
	}
	want := callUnsubscribe
	if subscribe {
		want = callSubscribe
	}
	var matched bool
	var completed *call
	c.qmu.Lock()
	if len(c.queue) > 0 && !null {
		head := c.queue[0]
		if head.kind == want && head.next < len(head.chans) && head.chans[head.next] == string(ch) {
			matched = true
			head.next++
			if subscribe && head.next == len(head.chans) {
				c.pop()
				completed = head
			}
		}
	}
	c.qmu.Unlock()
	var lost string
	if !matched && !null && !subscribe {
		lost = string(ch)
	}
	if subscribe && !matched {
		err = fmt.Errorf("%w: subscribe confirmation for %q matches no command", resp.ErrProtocol, ch)
	}
	if err != nil {
		return err
	}
	if err := rd.Skip(1); err != nil { // the subscription count
		if completed != nil {
			// Popped already: the reader's last act, failing the queue,
			// would not reach it.
			completed.err = err
			close(completed.done)
		}
		return err
	}
	if lost != "" && c.hooks.OnLost != nil && !c.closing.Load() {
		c.hooks.OnLost(lost)
	}
	if completed != nil {
		close(completed.done)
	}
	return nil
}

// pong completes the call waiting for a PING reply: a Ping, or an
// unsubscribe (see readConfirmation).
func (c *Conn) pong() error {
	c.qmu.Lock()
	if len(c.queue) == 0 || (c.queue[0].kind != callPing && c.queue[0].kind != callUnsubscribe) {
		c.qmu.Unlock()
		return fmt.Errorf("%w: PONG with no PING waiting", resp.ErrProtocol)
	}
	head := c.queue[0]
	c.pop()
	c.qmu.Unlock()
	if head.kind == callUnsubscribe && head.err == nil && head.next < len(head.chans) {
		head.err = fmt.Errorf("%w: unsubscribe of %d channels confirmed %d", resp.ErrProtocol, len(head.chans), head.next)
	}
	close(head.done)
	return nil
}

// failed hands an error reply to the call at the head of the queue. An
// unsubscribe keeps it until its pong (see readConfirmation).
func (c *Conn) failed(err *resp.ServerError) error {
	c.qmu.Lock()
	if len(c.queue) == 0 {
		c.qmu.Unlock()
		// Most likely the server refusing the connection (maxclients)
		// before it closes it: its error is the wire's cause.
		return fmt.Errorf("%w: error reply with no command waiting: %w", resp.ErrProtocol, err)
	}
	head := c.queue[0]
	if head.kind == callUnsubscribe {
		if head.err == nil {
			head.err = err
		}
		c.qmu.Unlock()
		return nil
	}
	c.pop()
	c.qmu.Unlock()
	head.err = err
	close(head.done)
	return nil
}

// simple handles a simple-string reply: +PONG answers a PING sent while
// the connection holds no subscription; no other command of this
// connection is answered with one.
func (c *Conn) simple(s []byte) error {
	if string(s) == "PONG" {
		return c.pong()
	}
	return fmt.Errorf("%w: reply %q does not fit the command waiting", resp.ErrProtocol, s)
}

// pop removes the head of the queue; the caller holds qmu.
func (c *Conn) pop() {
	c.queue[0] = nil
	c.queue = c.queue[1:]
	if len(c.queue) == 0 {
		c.queue = c.queue[:0:0] // let the backing array go once drained
	}
}
