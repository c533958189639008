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
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardcast/shardcast/internal/notsent"
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
	// it, with an error wrapping os.ErrDeadlineExceeded. A write gets at
	// least Write and at most 1.5 × Write (see armWrite). The caller doing
	// a write cannot leave before it ends, so its Publish may outlast its
	// ctx by up to that when the server stops reading and the socket's
	// send buffer is full.
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
	// deadline is the write deadline set on nc, touched only by the
	// goroutine holding writing (see flush).
	deadline time.Time
	werr     error // why a write failed: the cause the reader reports
	err      error // set once the wire failed; no call is queued after
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
