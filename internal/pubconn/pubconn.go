// Package pubconn is a pipelined connection for PUBLISH commands to one
// standalone Redis, or SPUBLISH commands to one cluster master.
//
// Concurrent publishers share writes without a flush delay: a caller that
// finds no write in progress writes everything queued so far, and callers
// that arrive while it writes only append to the buffer it will write next.
// Under load one write syscall carries many commands; with a single
// publisher each command goes out at once. A reader goroutine matches the
// integer replies, in order, to the waiting calls, and a watchdog drops a
// wire whose oldest command has gone unanswered for the reply timeout.
//
// PublishAsync and SPublishAsync queue a publish without waiting: the
// reader passes the outcome to a func the caller gave, so a caller may
// keep many publishes in flight without a goroutine parked on each.
package pubconn

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardcast/shardcast/envelope"
	"github.com/shardcast/shardcast/internal/notsent"
	"github.com/shardcast/shardcast/internal/resp"
	"github.com/shardcast/shardcast/internal/subconn"
)

// ErrClosed is returned by Publish after Close.
var ErrClosed = errors.New("pubconn: closed")

// ErrBacklog is returned by Publish when MaxBacklog bytes of commands
// already wait for a write: the server has stopped reading (a write is
// blocked), and queueing more would only grow memory.
var ErrBacklog = errors.New("pubconn: publish backlog full (the server is not reading)")

// ErrNotSent marks the errors of calls whose command never reached a
// wire: the Pub was closed, the dial failed (or is in its redial delay),
// the backlog was full, or the wire had already failed. Resending such a
// message cannot publish it twice. Every other failure after the command
// was queued leaves it unknown whether Redis ran it. It is the root
// package's shardcast.ErrNotSent, so that a broker's Publish error that
// wraps a Pub's error answers errors.Is for the user.
var ErrNotSent = notsent.Err

// notSent wraps err so that errors.Is finds both ErrNotSent and err, with
// err's message.
type notSent struct{ err error }

func (e *notSent) Error() string   { return e.err.Error() }
func (e *notSent) Unwrap() []error { return []error{ErrNotSent, e.err} }

// MaxBacklog bounds the bytes of commands waiting behind a write in
// progress. A healthy server drains a write in microseconds.
const MaxBacklog = 8 << 20

// Pub publishes to one instance over one connection, redialled on demand
// after a failure. Its methods are safe for concurrent use.
type Pub struct {
	dial subconn.Dialer
	t    Timeouts
	// published counts the publishes and commands of Do that succeeded.
	published atomic.Uint64

	// cur is w, readable without mu: the path every call takes while the
	// wire is up. It is stored wherever w is, and cleared by Close.
	cur atomic.Pointer[wire]

	mu      sync.Mutex
	w       *wire         // nil until dialled, or after it failed
	dialing chan struct{} // closed when the dial in progress ends
	dialErr error         // outcome of the last dial, for its waiters
	// cancelDial ends the dial in progress, so that Close need not wait
	// for a login to a frozen server.
	cancelDial context.CancelFunc
	closed     bool
	wires      sync.WaitGroup // reader goroutines
	// onStall is called when a command waited longer than t.Stall.
	onStall func()
	// After a failed dial, calls fail at once with lastDialErr until
	// redialAt, instead of each waiting out a dial to a dead address.
	redialAt    time.Time
	lastDialErr error
}

// Timeouts bound a Pub's waits. A zero field means no bound.
type Timeouts struct {
	// Write bounds one write syscall; a write that takes longer (a server
	// that stopped reading) drops the wire and fails every call waiting on
	// it, with an error wrapping os.ErrDeadlineExceeded. The caller doing a
	// write cannot leave before it ends, so its Publish may outlast its ctx
	// by up to Write when the server stops reading and the socket's send
	// buffer is full.
	Write time.Duration
	// Reply bounds how long the oldest command may wait for its reply
	// before the wire is dropped as silent (a frozen server, a dead path
	// that keeps the socket open); the waiting calls fail with an error
	// wrapping os.ErrDeadlineExceeded.
	Reply time.Duration
	// Redial is how long, after a dial failed, calls fail at once (with
	// ErrNotSent and the dial's error) before the next dial is tried.
	Redial time.Duration
	// Stall, with Reply set, is how long the oldest command may wait
	// before the Pub's OnStall hook hears of it (see SetOnStall): the
	// server may have frozen, though not for long enough to drop the
	// wire. Zero: no stall report.
	Stall time.Duration
}

// New returns a Pub that dials d on first use (or on Ping), bounded by t.
func New(d subconn.Dialer, t Timeouts) *Pub {
	return &Pub{dial: d, t: t}
}

// call is one command waiting for its reply.
type call struct {
	err   error
	value any           // the reply, for a call that wants it (see Do)
	want  bool          // the caller wants the reply's value
	done  chan struct{} // receives one value when answered (a waiting call)
	at    time.Time     // when it was queued
	// fn, set for a call of PublishAsync, is called with the outcome
	// instead of a send on done; nobody waits for the call.
	fn func(error)
}

var calls = sync.Pool{New: func() any { return &call{done: make(chan struct{}, 1)} }}

// wire is one connection and its queue of unanswered commands.
type wire struct {
	nc net.Conn

	mu      sync.Mutex
	buf     []byte  // encoded commands not yet written
	spare   []byte  // the buffer being written, reused once written
	queue   []*call // queue[head:] unanswered, in command order (written or in buf)
	head    int     // answered slots at the front, reused rather than regrown
	writing bool
	werr    error // why a write failed: the cause the reader reports
	err     error // set once the wire failed; no call is queued after
	// queued counts the calls ever queued, sent those whose bytes were
	// handed to a write: the last queued-sent calls of the queue never
	// left, and fail as not sent if the wire dies. While a write runs,
	// sent counts its calls already (they may be on the wire), and
	// prevSent is what sent was before it: sent goes back to it if the
	// write wrote nothing.
	queued, sent, prevSent uint64
	// watch is the silence watchdog (see watchdog); armed while it is set.
	watch *time.Timer
	armed bool
	// stall and onStall are the Pub's (see SetOnStall); stalledOn is
	// 1 + the number (in queue order) of the command whose stall was
	// reported last, so that each stalled command is reported once.
	stall     time.Duration
	onStall   func()
	stalledOn uint64
	// runID is the server's run_id once runKnown (see learnRunID).
	runID    string
	runKnown bool
}

// Publish sends PUBLISH channel payload, with payload wrapped in the
// shardcast envelope stamped now unless raw, and waits for the reply
// (bounded by ctx). A failure of the wire fails the calls waiting on it;
// their messages may or may not have been published.
func (p *Pub) Publish(ctx context.Context, channel string, payload []byte, raw bool, now time.Time) error {
	_, err := p.do(ctx, command{channel: channel, payload: payload, raw: raw, now: now})
	return err
}

// SPublish sends SPUBLISH keyPrefix+channel payload, encoded as Publish
// does; keyPrefix (a partition's "{tag}." and the layout prefix) saves
// building the key per call.
func (p *Pub) SPublish(ctx context.Context, keyPrefix, channel string, payload []byte, raw bool, now time.Time) error {
	_, err := p.do(ctx, command{sharded: true, keyPrefix: keyPrefix, channel: channel, payload: payload, raw: raw, now: now})
	return err
}

// SPublishAgain is SPublish of a message stamped now that was sent before
// (a resend after a redirection or a failover): its reply is timed from
// this call, not from now, which may be older than the reply timeout.
func (p *Pub) SPublishAgain(ctx context.Context, keyPrefix, channel string, payload []byte, raw bool, now time.Time) error {
	_, err := p.do(ctx, command{sharded: true, keyPrefix: keyPrefix, channel: channel, payload: payload, raw: raw, now: now, again: true})
	return err
}

// PublishAsync queues PUBLISH channel payload, encoded as Publish does,
// and returns without waiting for the reply: done is called once with the
// outcome, as Publish would have returned it (nil once Redis accepted the
// message). payload is encoded before PublishAsync returns, so the caller
// may reuse it at once.
//
// PublishAsync waits, bounded by ctx, only when there is no connection and
// one must be dialled; the caller that finds no write in progress writes
// what is queued (bounded by Timeouts.Write), as Publish does. Once
// queued, the call is no longer bounded by ctx. A non-nil error means the
// command was not queued (it wraps ErrNotSent: the Pub is closed, the dial
// failed or ctx ended first, the backlog is full, the wire had failed), and
// done is never called. Otherwise done is called exactly once, on the
// Pub's reader goroutine: when the reply arrives, when the wire fails
// (calls whose command never reached a write get an error wrapping
// ErrNotSent, as with Publish), when the watchdog drops a silent wire, or
// by Close, before Close returns. done must not block: it holds up every
// reply behind it; in particular it must not call Publish or wait for
// another PublishAsync.
//
// Commands of one Pub go on the wire in the order their calls queued
// them, whatever the form, so calls made one after another from one
// goroutine are sent in call order. A func value passed in done is not
// copied; passing the same one for many calls allocates nothing.
func (p *Pub) PublishAsync(ctx context.Context, channel string, payload []byte, raw bool, now time.Time, done func(error)) error {
	_, err := p.send(ctx, command{channel: channel, payload: payload, raw: raw, now: now}, asyncDone(done))
	return err
}

// SPublishAsync is PublishAsync for SPUBLISH keyPrefix+channel, encoded as
// SPublish does.
func (p *Pub) SPublishAsync(ctx context.Context, keyPrefix, channel string, payload []byte, raw bool, now time.Time, done func(error)) error {
	_, err := p.send(ctx, command{sharded: true, keyPrefix: keyPrefix, channel: channel, payload: payload, raw: raw, now: now}, asyncDone(done))
	return err
}

// asyncDone is done, or a func that ignores the outcome when done is nil:
// a call of PublishAsync is told apart from a waiting one by its fn.
func asyncDone(done func(error)) func(error) {
	if done == nil {
		return ignoreOutcome
	}
	return done
}

func ignoreOutcome(error) {}

// Do sends one command (args[0] is its name) through the pipeline and
// returns its reply as resp.Reader.Reply decodes it: string, int64, nil,
// []any; an error reply is returned as the error (a *resp.ServerError).
func (p *Pub) Do(ctx context.Context, args ...string) (any, error) {
	if len(args) == 0 {
		return nil, errors.New("pubconn: empty command")
	}
	return p.do(ctx, command{args: args})
}

// DoAsking is Do with ASKING sent just before the command, in the same
// write, so that no other command comes between them: the way to resend a
// command Redis Cluster redirected with ASK (a slot being migrated) to the
// node named. ASKING's own reply is not returned; were it refused, the
// command would meet a redirection of its own.
func (p *Pub) DoAsking(ctx context.Context, args ...string) (any, error) {
	if len(args) == 0 {
		return nil, errors.New("pubconn: empty command")
	}
	return p.do(ctx, command{args: args, asking: true})
}

// DoUncounted is Do (DoAsking when asking) for a command of the library's
// own housekeeping, which Published must not count even when it is a
// script.
func (p *Pub) DoUncounted(ctx context.Context, asking bool, args ...string) (any, error) {
	if len(args) == 0 {
		return nil, errors.New("pubconn: empty command")
	}
	return p.do(ctx, command{args: args, asking: asking, uncounted: true})
}

// Script sends a script call, verb ("EVALSHA" or "EVAL") with script
// (its SHA1 or its source), keys and args, through the pipeline like Do,
// without building the command's arguments first: a call allocates
// nothing of its own. asking sends ASKING just before it (see DoAsking);
// uncounted keeps it out of Published (see DoUncounted); runID adds one
// more argument, last: the run_id of the server the wire reaches (see
// learnRunID), learned with INFO server before the wire's first such call.
func (p *Pub) Script(ctx context.Context, asking, uncounted, runID bool, verb, script string, keys, args []string) (any, error) {
	return p.do(ctx, command{verb: verb, script: script, keys: keys, args: args, asking: asking, uncounted: uncounted, runID: runID})
}

// learnRunID teaches w its server, for the scripts that ask for it (see
// Script): the run_id INFO server reports, which a server draws anew each
// time it starts. A wire reaches one server process for its
// whole life (a restarted server is a new wire), so a run_id learned
// once per wire is right for every call on it. A server that does not
// answer INFO (a user without its permission) gives "".
func (p *Pub) learnRunID(ctx context.Context, w *wire) error {
	w.mu.Lock()
	known := w.runKnown
	w.mu.Unlock()
	if known {
		return nil
	}
	c, err := p.queue(ctx, w, command{args: infoServer}, nil, false)
	if err != nil {
		return err
	}
	select {
	case <-c.done:
	case <-ctx.Done():
		return ctx.Err() // the reply may still come: c stays with the wire
	}
	value, err := c.value, c.err
	c.err, c.value = nil, nil
	calls.Put(c)
	id := ""
	if err != nil {
		// Only a lasting refusal makes the run_id unknown for the wire's
		// life: a user without the permission, a server with INFO
		// renamed away. Anything else (LOADING, a failed wire) is the
		// call's error, and the next call asks again.
		se, refused := resp.IsServerError(err)
		if !refused || !(strings.HasPrefix(se.Msg, "NOPERM") || strings.HasPrefix(se.Msg, "ERR unknown command")) {
			return err
		}
	}
	if text, ok := value.(string); ok {
		id = runIDOf(text)
	}
	w.mu.Lock()
	w.runID, w.runKnown = id, true
	w.mu.Unlock()
	return nil
}

// infoServer is the command learnRunID sends.
var infoServer = []string{"INFO", "server"}

// runIDOf returns the run_id field of INFO server's reply, "" if none.
func runIDOf(info string) string {
	_, rest, ok := strings.Cut(info, "run_id:")
	if !ok {
		return ""
	}
	id, _, _ := strings.Cut(rest, "\n")
	return strings.TrimSpace(id)
}

// SetOnStall sets the hook the watchdog calls (on its timer's goroutine:
// the hook must not block), once per command that stalls, when the oldest unanswered command of a wire
// has waited longer than Timeouts.Stall (the wire stays up until Reply).
// Call it before the Pub's first use.
func (p *Pub) SetOnStall(f func()) { p.onStall = f }

// Addr returns the address of the server p publishes to.
func (p *Pub) Addr() string { return p.dial.Addr }

// Published returns how many publishes (also those sent with Do) and
// scripts (EVAL, EVALSHA) succeeded.
func (p *Pub) Published() uint64 { return p.published.Load() }

// Ping connects if needed and runs a PING through the pipeline: it proves
// the server accepts this connection's commands (a password it requires
// was given).
func (p *Pub) Ping(ctx context.Context) error {
	_, err := p.do(ctx, command{ping: true})
	return err
}

// command is one command to encode; a value, so encoding allocates nothing.
type command struct {
	args      []string // a command of Do, or a script's ARGV (with verb)
	verb      string   // a script call: EVALSHA or EVAL, of script with keys and args
	script    string
	keys      []string
	asking    bool // ASKING goes just before the command
	uncounted bool // never counted in Published (see DoUncounted)
	ping      bool
	sharded   bool
	keyPrefix string
	channel   string
	payload   []byte
	raw       bool
	now       time.Time // the envelope's publish time
	again     bool      // a resend: now may be long past (see SPublishAgain)
	runID     bool      // a script given the wire's run_id as its last ARGV
}

// publishes reports whether the command publishes: a PUBLISH or SPUBLISH,
// or a script (which may).
func (cmd *command) publishes() bool {
	if cmd.uncounted {
		return false
	}
	if cmd.verb != "" {
		return true // a script, which may publish
	}
	if cmd.args != nil {
		name := strings.ToUpper(cmd.args[0])
		return strings.HasPrefix(name, "EVAL") || name == "SPUBLISH" || name == "PUBLISH"
	}
	return !cmd.ping
}

// replied reports whether the command's reply is a value for its caller
// (a command of Do or a script), not a publish's count.
func (cmd *command) replied() bool { return cmd.args != nil || cmd.verb != "" }

func (cmd *command) append(b []byte, run string) []byte {
	if cmd.verb != "" {
		extra := 0
		if cmd.runID {
			extra = 1
		}
		b = resp.AppendHeader(b, '*', 3+len(cmd.keys)+len(cmd.args)+extra)
		b = resp.AppendBulk(b, cmd.verb)
		b = resp.AppendBulk(b, cmd.script)
		var n [20]byte
		b = resp.AppendBulkBytes(b, strconv.AppendInt(n[:0], int64(len(cmd.keys)), 10))
		for _, k := range cmd.keys {
			b = resp.AppendBulk(b, k)
		}
		for _, a := range cmd.args {
			b = resp.AppendBulk(b, a)
		}
		if cmd.runID {
			b = resp.AppendBulk(b, run)
		}
		return b
	}
	if cmd.args != nil {
		return resp.AppendCommand(b, cmd.args[0], cmd.args[1:])
	}
	if cmd.ping {
		return append(b, "*1\r\n$4\r\nPING\r\n"...)
	}
	return appendPublish(b, cmd.sharded, cmd.keyPrefix, cmd.channel, cmd.payload, cmd.raw, cmd.now)
}

func (p *Pub) do(ctx context.Context, cmd command) (any, error) {
	c, err := p.send(ctx, cmd, nil)
	if err != nil {
		return nil, err
	}
	if done := ctx.Done(); done == nil {
		<-c.done // a plain receive costs less than a select
	} else {
		select {
		case <-c.done:
		case <-done:
			// The reply may still come: c stays with the wire, not the pool.
			return nil, ctx.Err()
		}
	}
	err, value := c.err, c.value
	c.err, c.value = nil, nil
	calls.Put(c)
	if err == nil && cmd.publishes() {
		p.published.Add(1)
	}
	return value, err
}

// send queues cmd on the live wire (dialling one if needed, bounded by
// ctx) and starts a write unless one is in progress. Without fn it
// returns the call whose done channel the reply will signal; with fn the
// call belongs to the wire, which passes the outcome to fn, and send
// returns nil. An error means nothing was queued, and wraps ErrNotSent.
func (p *Pub) send(ctx context.Context, cmd command, fn func(error)) (*call, error) {
	w, waited, err := p.wire(ctx)
	if err != nil {
		return nil, &notSent{err}
	}
	if cmd.runID {
		if err := p.learnRunID(ctx, w); err != nil {
			return nil, &notSent{err}
		}
	}
	return p.queue(ctx, w, cmd, fn, waited)
}

// queue is send on wire w: waited tells that getting w took a dial.
func (p *Pub) queue(ctx context.Context, w *wire, cmd command, fn func(error), waited bool) (*call, error) {
	c := calls.Get().(*call)
	c.fn = fn
	c.want = cmd.replied()
	c.at = cmd.now
	if c.at.IsZero() || waited || cmd.again {
		// A dial, or a resend's backoffs, may have taken longer than the
		// silence limit.
		c.at = time.Now()
	}
	w.mu.Lock()
	if w.err != nil || len(w.buf) >= MaxBacklog {
		err := w.err
		if err == nil {
			err = ErrBacklog
		}
		w.mu.Unlock()
		c.fn = nil
		calls.Put(c)
		return nil, &notSent{err}
	}
	if cmd.asking {
		// ASKING's reply goes to a call nobody waits for (done is
		// buffered); at dates it for the watchdog.
		w.buf = append(w.buf, "*1\r\n$6\r\nASKING\r\n"...)
		w.enqueue(&call{done: make(chan struct{}, 1), at: c.at})
	}
	w.buf = cmd.append(w.buf, w.runID)
	w.enqueue(c)
	if fn != nil {
		// The reader may complete c, and the pool hand it out again,
		// as soon as w.mu is released.
		c = nil
	}
	if p.t.Reply > 0 && !w.armed {
		w.armed = true
		first := p.t.Reply
		if w.stall > 0 {
			first = min(first, w.stall)
		}
		if w.watch == nil {
			timeout := p.t.Reply
			w.watch = time.AfterFunc(first, func() { w.watchdog(timeout) })
		} else {
			w.watch.Reset(first)
		}
	}
	switch {
	case w.writing:
		w.mu.Unlock() // the write in progress takes it
	case fn != nil && w.sent > w.answered() && len(w.buf) < asyncWriteBytes:
		// A call of PublishAsync while written commands await replies
		// leaves the write to the reader, which makes it once it has
		// handled the replies it holds: the calls made meanwhile go out
		// in one write, as redis-benchmark -P does, instead of a write
		// each. The reader will come: a reply is due, or the wire fails.
		w.mu.Unlock()
	case fn != nil:
		// A call of PublishAsync with nothing in flight: claim the write
		// and yield once before making it, so that calls other goroutines
		// are about to make (the waiters a reader just woke, the handlers
		// of requests that arrived together) join it instead of each
		// making a write of its own. The write waits one turn of the
		// scheduler; a busy process saves a write syscall (and a wake-up
		// of the server) per call that joins, an idle one loses nothing.
		w.writing = true
		w.mu.Unlock()
		runtime.Gosched()
		w.mu.Lock()
		w.flush(p.t.Write) // unlocks w.mu
	default:
		w.flush(p.t.Write) // unlocks w.mu
	}
	return c, nil
}

// asyncWriteBytes is how many queued bytes make a call of PublishAsync
// write them itself rather than leave them for the reader.
const asyncWriteBytes = 64 << 10

// answered returns how many calls of w had their replies matched (or
// failed). The caller holds w.mu.
func (w *wire) answered() uint64 {
	return w.queued - uint64(len(w.queue)-w.head)
}

// complete hands a call its outcome: a waiting caller is woken; a call of
// PublishAsync goes back to the pool and its fn runs, here, on the
// reader's goroutine.
func (p *Pub) complete(c *call, value any, err error) {
	if fn := c.fn; fn != nil {
		c.fn, c.at = nil, time.Time{}
		calls.Put(c)
		if err == nil {
			p.published.Add(1)
		}
		fn(err)
		return
	}
	c.value, c.err = value, err
	c.done <- struct{}{}
}

// enqueue appends c to the calls waiting for replies. The caller holds
// w.mu and has appended c's command to w.buf.
func (w *wire) enqueue(c *call) {
	if w.head > 0 && len(w.queue) == cap(w.queue) {
		n := copy(w.queue, w.queue[w.head:])
		clear(w.queue[n:])
		w.queue, w.head = w.queue[:n], 0
	}
	w.queue = append(w.queue, c)
	w.queued++
}

// watchdog runs from w.watch, armed while commands wait for replies. It
// closes the wire when the oldest unanswered command has waited longer
// than timeout: the server froze or the path went silent without closing
// the socket, and no reply is coming. Every call waiting on the wire then
// fails, and the next Publish dials afresh. Otherwise it re-arms for when
// the oldest would be late, or disarms when nothing waits; so it fires at
// most once per timeout, whatever the publish rate. With a stall hook
// (see SetOnStall) it also looks every Stall, and reports each command
// that, as the oldest, has waited longer than Stall, once.
func (w *wire) watchdog(timeout time.Duration) {
	w.mu.Lock()
	if w.err != nil || w.head >= len(w.queue) {
		w.armed = false
		w.mu.Unlock()
		return
	}
	age := time.Since(w.queue[w.head].at)
	var report func()
	headSeq := w.queued - uint64(len(w.queue)-w.head) + 1 // 1 + the head's number
	stalled := w.stall > 0 && age > w.stall
	if stalled && w.stalledOn != headSeq {
		w.stalledOn, report = headSeq, w.onStall
	}
	if age <= timeout {
		next := timeout - age
		switch {
		case w.stall <= 0:
		case !stalled:
			next = min(next, w.stall-age) // when the oldest would stall
		default:
			// Look again within a Stall, to see the next command stall
			// even while commands keep the queue busy.
			next = min(next, w.stall)
		}
		w.watch.Reset(next + time.Millisecond)
		w.mu.Unlock()
		if report != nil {
			report() // outside the lock: it must not block
		}
		return
	}
	if w.werr == nil {
		w.werr = fmt.Errorf("no reply for %v: %w", timeout, os.ErrDeadlineExceeded)
	}
	w.armed = false
	w.mu.Unlock()
	if report != nil {
		report()
	}
	_ = w.nc.Close()
}

// flush writes w.buf until nothing is left, then clears w.writing. The
// caller holds w.mu and set nothing yet; flush returns with w.mu unlocked.
func (w *wire) flush(timeout time.Duration) {
	w.writing = true
	for len(w.buf) > 0 && w.err == nil {
		if len(w.queue)-w.head > 1 {
			// Others are in flight: their replies are waking publishers
			// that will have commands for this write if given a moment.
			w.mu.Unlock()
			runtime.Gosched()
			w.mu.Lock()
		}
		out, batch := w.buf, w.queued
		w.buf, w.spare = w.spare[:0], nil
		// The reader may fail the wire while the write runs: whatever it
		// carries may have reached Redis, so none of it is "not sent".
		w.prevSent, w.sent = w.sent, batch
		w.mu.Unlock()
		var err error
		if timeout > 0 {
			err = w.nc.SetWriteDeadline(time.Now().Add(timeout))
		}
		n := 0
		if err == nil {
			n, err = w.nc.Write(out)
		}
		w.mu.Lock()
		if n == 0 {
			w.sent = w.prevSent // none left: not sent after all
		} // else a partial write may have carried any of them
		if cap(out) <= 1<<20 {
			w.spare = out[:0]
		}
		if err != nil {
			// A partial write leaves the stream unusable: the reader
			// fails every queued call once the socket is closed, with
			// this error as the cause (set before the close it causes).
			if w.werr == nil {
				w.werr = err
			}
			_ = w.nc.Close()
			break
		}
	}
	w.writing = false
	w.mu.Unlock()
}

// wire returns the live connection, dialling one if there is none. Callers
// that arrive during a dial wait for it; waited reports that this call
// dialled or waited for a dial.
func (p *Pub) wire(ctx context.Context) (_ *wire, waited bool, _ error) {
	if w := p.cur.Load(); w != nil {
		return w, false, nil
	}
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, waited, ErrClosed
		}
		if p.w != nil {
			w := p.w
			p.mu.Unlock()
			return w, waited, nil
		}
		if p.dialing == nil && p.lastDialErr != nil && time.Now().Before(p.redialAt) {
			err := p.lastDialErr
			p.mu.Unlock()
			return nil, waited, err
		}
		if ch := p.dialing; ch != nil {
			waited = true
			p.mu.Unlock()
			select {
			case <-ch:
			case <-ctx.Done():
				return nil, waited, ctx.Err()
			}
			p.mu.Lock()
			err := p.dialErr
			p.mu.Unlock()
			if err != nil {
				return nil, waited, err
			}
			continue
		}
		waited = true
		ch := make(chan struct{})
		dctx, cancel := context.WithCancel(ctx)
		p.dialing, p.cancelDial = ch, cancel
		p.mu.Unlock()
		w, err := p.open(dctx)
		cancel()
		p.mu.Lock()
		p.dialing, p.cancelDial, p.dialErr = nil, nil, err
		switch {
		case p.closed:
			if err == nil {
				_ = w.nc.Close()
			}
			err, p.dialErr = ErrClosed, ErrClosed
		case err == nil:
			p.w = w
			p.cur.Store(w)
			p.lastDialErr = nil
			p.wires.Add(1)
			go p.read(w)
		case ctxErr(ctx) != nil:
			// This caller's ctx ended the dial; those waiting for it
			// have ctxs of their own and dial again.
			p.dialErr = nil
		default:
			p.lastDialErr, p.redialAt = err, time.Now().Add(p.t.Redial)
		}
		p.mu.Unlock()
		close(ch)
		if err != nil {
			return nil, waited, err
		}
		return w, waited, nil
	}
}

// open dials and authenticates a new wire.
func (p *Pub) open(ctx context.Context) (*wire, error) {
	nc, err := p.dial.Dial(ctx)
	if err != nil {
		// Report ctx's end as such, not as the i/o timeout of the socket
		// deadline taken from it.
		if cerr := ctxErr(ctx); cerr != nil {
			err = cerr
		}
		return nil, fmt.Errorf("pubconn: dial %s: %w", p.dial.Addr, err)
	}
	// Login reports ctx's end as such itself.
	if err := p.dial.Login(ctx, nc); err != nil {
		_ = nc.Close()
		return nil, fmt.Errorf("pubconn: auth on %s: %w", p.dial.Addr, err)
	}
	w := &wire{nc: nc, onStall: p.onStall}
	if p.onStall != nil {
		w.stall = p.t.Stall
	}
	return w, nil
}

// ctxErr is ctx.Err(), or DeadlineExceeded once ctx's deadline has passed:
// a socket deadline taken from ctx can fire before ctx's own timer does.
func ctxErr(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return context.DeadlineExceeded
	}
	return nil
}

// read matches replies to queued calls until the wire fails, then fails
// every call still queued and forgets the wire so the next Publish dials.
func (p *Pub) read(w *wire) {
	defer p.wires.Done()
	br := bufio.NewReaderSize(w.nc, 16<<10)
	rd := resp.NewReader(br)
	var err error
	woke := false // a call of PublishAsync was completed since the last write check
	for {
		// A publish is answered on one line; a command of Do may get a
		// bulk string or an array, decoded whole.
		var line []byte
		var value any
		var kind byte
		kind, err = rd.Peek()
		if err != nil {
			break
		}
		if kind == '$' || kind == '*' {
			value, err = rd.Reply()
		} else {
			line, err = rd.Line()
		}
		if err != nil {
			break
		}
		var res error
		if line != nil {
			switch line[0] {
			case ':', '+':
			case '-':
				res = &resp.ServerError{Msg: string(line[1:])}
			default:
				err = fmt.Errorf("%w: unexpected reply %q", resp.ErrProtocol, line)
			}
		}
		if err != nil {
			break
		}
		w.mu.Lock()
		if w.head == len(w.queue) {
			if res != nil && w.werr == nil {
				// An error before any command: the server refused the
				// connection (maxclients) and is closing it. Its words are
				// the cause, not the closed socket a write then meets.
				w.werr = res
			}
			w.mu.Unlock()
			err = fmt.Errorf("%w: reply with no command waiting", resp.ErrProtocol)
			break
		}
		c := w.queue[w.head]
		w.queue[w.head] = nil
		w.head++
		if w.head == len(w.queue) {
			w.queue, w.head = w.queue[:0], 0
		}
		w.mu.Unlock()
		switch {
		case !c.want && line == nil:
			res = fmt.Errorf("%w: a multi-line reply to a publish", resp.ErrProtocol)
		case c.want && line != nil && res == nil:
			value, res = lineValue(line)
		}
		if c.fn != nil {
			woke = true
		}
		p.complete(c, value, res)
		if br.Buffered() == 0 {
			// The replies read so far are handled: before waiting for
			// more, write what calls of PublishAsync left for this moment
			// (see send). Their done funcs may have let callers go on to
			// more calls: claim the write and yield once, so that those
			// calls join it rather than each write on its own.
			w.mu.Lock()
			if !w.writing && w.err == nil && (woke || len(w.buf) > 0) {
				if woke {
					w.writing = true
					w.mu.Unlock()
					runtime.Gosched()
					w.mu.Lock()
				}
				w.flush(p.t.Write) // unlocks w.mu
			} else {
				w.mu.Unlock()
			}
			woke = false
		}
	}
	_ = w.nc.Close()
	p.mu.Lock()
	if p.w == w {
		p.w = nil
		p.cur.Store(nil)
	}
	closed := p.closed
	p.mu.Unlock()
	w.mu.Lock()
	switch {
	case closed:
		err = ErrClosed
	case w.werr != nil:
		err = fmt.Errorf("pubconn: connection to %s dropped: %w", p.dial.Addr, w.werr)
	default:
		err = fmt.Errorf("pubconn: connection to %s lost: %w", p.dial.Addr, err)
	}
	w.err = err
	queue := w.queue[w.head:]
	unsent := int(w.queued - w.sent) // the tail of the queue never reached a write
	w.queue, w.head, w.buf = nil, 0, nil
	if w.watch != nil {
		w.watch.Stop()
		w.armed = false
	}
	w.mu.Unlock()
	var notSentErr error = &notSent{err}
	for i, c := range queue {
		if i >= len(queue)-unsent {
			p.complete(c, nil, notSentErr)
		} else {
			p.complete(c, nil, err)
		}
	}
}

// lineValue decodes a one-line reply (an integer or a simple string) for a
// call of Do.
func lineValue(line []byte) (any, error) {
	if line[0] == '+' {
		return string(line[1:]), nil
	}
	n, err := strconv.ParseInt(string(line[1:]), 10, 64)
	if err != nil {
		return nil, fmt.Errorf("%w: bad integer %q", resp.ErrProtocol, line)
	}
	return n, nil
}

// Close closes the connection, fails the calls waiting on it, ends a dial
// in progress and waits for the reader to exit.
func (p *Pub) Close() {
	p.mu.Lock()
	p.closed = true
	p.cur.Store(nil)
	w := p.w
	cancelDial := p.cancelDial
	p.mu.Unlock()
	if cancelDial != nil {
		cancelDial()
	}
	if w != nil {
		_ = w.nc.Close()
	}
	p.wires.Wait()
}

// appendPublish encodes PUBLISH channel <envelope(payload)>, or SPUBLISH
// keyPrefix+channel when sharded.
func appendPublish(b []byte, sharded bool, keyPrefix, channel string, payload []byte, raw bool, now time.Time) []byte {
	if sharded {
		b = append(b, "*3\r\n$8\r\nSPUBLISH\r\n"...)
	} else {
		b = append(b, "*3\r\n$7\r\nPUBLISH\r\n"...)
	}
	b = resp.AppendHeader(b, '$', len(keyPrefix)+len(channel))
	b = append(append(append(b, keyPrefix...), channel...), '\r', '\n')
	if raw {
		return resp.AppendBulkBytes(b, payload)
	}
	b = resp.AppendHeader(b, '$', envelope.Size(len(payload)))
	b = envelope.Append(b, now, payload)
	return append(b, '\r', '\n')
}
