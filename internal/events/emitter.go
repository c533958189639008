package events

import (
	"context"
	"fmt"
	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/compact"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"
)

// Emitter logs Events and delivers them to the application's OnEvent
// callback from one background goroutine, in the order they were emitted.
//
// Engines emit from their socket read loops, which must never wait for
// application code: Emit only appends to an unbounded in-memory queue and
// returns. The queue is unbounded on purpose: events are rare (drops are
// aggregated before they get here) and losing one would hide a loss of
// messages from the application, which is the one thing events exist to
// prevent.
//
// A panic in the callback is recovered and logged at error level with its
// stack; the event that caused it is not retried and later events are
// still delivered. The process keeps running because one bad event report
// must not take down every subscription of the node.
//
// The callback must not call Close on the same Emitter (directly, or
// through a Broker's Close that closes it): Close waits for the callback to
// return, so it would wait for itself.
type Emitter struct {
	onEvent func(shardcast.Event)
	logger  *slog.Logger

	mu     sync.Mutex
	queue  []shardcast.Event
	closed bool

	// wake holds at most one pending wake-up: the goroutine re-reads the
	// queue after every wake, so extra signals carry no information and
	// can be dropped without losing an event.
	wake chan struct{}
	done chan struct{}
}

// NewEmitter returns an Emitter that passes events to onEvent. Every event
// is also logged on logger (nil means discard), one line each, written
// here for both engines: EventInterrupted, EventDropped and EventError
// at warn level, so that losses and background failures are visible even
// to applications that set no OnEvent, the other kinds at info level (see
// eventLevel). A line says what happened in its message and carries the
// node, the partitions (compact: "0-41,64"), the number of channels, the
// gap and the cause as attributes. Lines are written by the background
// goroutine, just before the event goes to onEvent (which may be nil), so
// that a slow log writer (a full pipe on stderr) never holds up the
// engine's read loop.
func NewEmitter(onEvent func(shardcast.Event), logger *slog.Logger) *Emitter {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	e := &Emitter{
		onEvent: onEvent,
		logger:  logger,
		wake:    make(chan struct{}, 1),
		done:    make(chan struct{}),
	}
	go e.run()
	return e
}

// Emit queues ev for the log and the callback and returns at once; it
// never blocks on either. Events emitted after Close are dropped.
func (e *Emitter) Emit(ev shardcast.Event) {
	if e.onEvent == nil && !e.logger.Enabled(context.Background(), eventLevel(ev)) {
		return // nobody would see it
	}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return
	}
	e.queue = append(e.queue, ev)
	e.mu.Unlock()
	e.signal()
}

// Close delivers every event queued before it was called, then stops the
// background goroutine and returns. It is safe to call more than once and
// from several goroutines; every call returns after the goroutine exited.
func (e *Emitter) Close() {
	e.mu.Lock()
	e.closed = true
	e.mu.Unlock()
	e.signal()
	<-e.done
}

func (e *Emitter) signal() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

func (e *Emitter) run() {
	defer close(e.done)
	// Two buffers swap roles so that a steady trickle of events does not
	// allocate a new queue for every batch.
	var batch []shardcast.Event
	for {
		e.mu.Lock()
		batch, e.queue = e.queue, batch[:0]
		closed := e.closed
		e.mu.Unlock()

		if len(batch) == 0 {
			if closed {
				return
			}
			<-e.wake
			continue
		}
		for i := range batch {
			e.log(batch[i])
			if e.onEvent != nil {
				e.deliver(batch[i])
			}
			// Drop references so the app's channel lists can be collected.
			batch[i] = shardcast.Event{}
		}
	}
}

func (e *Emitter) deliver(ev shardcast.Event) {
	defer func() {
		if r := recover(); r != nil {
			e.logger.Error("shardcast: OnEvent panicked; event skipped",
				slog.String("event", ev.Kind.String()),
				slog.String("panic", fmt.Sprint(r)),
				slog.String("stack", string(debug.Stack())))
		}
	}()
	e.onEvent(ev)
}

func (e *Emitter) log(ev shardcast.Event) {
	level := eventLevel(ev)
	// The Enabled check keeps Emit cheap when the level is filtered out:
	// building the attributes would format the whole event.
	ctx := context.Background()
	if !e.logger.Enabled(ctx, level) {
		return
	}
	attrs := make([]slog.Attr, 0, 10)
	attrs = append(attrs, slog.String("kind", ev.Kind.String()))
	if ev.Phase != "" {
		attrs = append(attrs, slog.String("phase", ev.Phase))
	}
	if ev.Shard != "" {
		attrs = append(attrs, slog.String("node", ev.Shard))
	}
	if len(ev.Partitions) > 0 {
		attrs = append(attrs, slog.String("partitions", compact.Ints(ev.Partitions)))
	}
	if len(ev.Channels) > 0 {
		attrs = append(attrs, slog.Int("channels", len(ev.Channels)))
	}
	if ev.Kind == shardcast.EventHotChannel && len(ev.Channels) == 1 {
		attrs = append(attrs, slog.String("channel", ev.Channels[0]))
	}
	if ev.Count > 0 {
		attrs = append(attrs, slog.Uint64("count", ev.Count))
	}
	switch {
	case !ev.Since.IsZero() && !ev.Until.IsZero():
		attrs = append(attrs, slog.Duration("gap", ev.Until.Sub(ev.Since).Round(time.Millisecond)))
	case !ev.Since.IsZero() && ev.Kind == shardcast.EventInterrupted:
		attrs = append(attrs, slog.Time("since", ev.Since))
	}
	if ev.Truncated {
		attrs = append(attrs, slog.Bool("truncated", true))
	}
	if ev.Err != nil {
		attrs = append(attrs, slog.String("err", ev.Err.Error()))
	}
	e.logger.LogAttrs(ctx, level, eventMessage(ev), attrs...)
}

// eventMessage is the log line's message for ev: what happened, in words;
// the attributes carry which node, which partitions, and why.
func eventMessage(ev shardcast.Event) string {
	switch ev.Kind {
	case shardcast.EventInterrupted:
		return "shardcast: subscriptions interrupted; their messages may be lost until they are restored"
	case shardcast.EventRestored:
		return "shardcast: subscriptions restored; gap is how long their messages may have been lost"
	case shardcast.EventDropped:
		if ev.Err != nil {
			return "shardcast: messages dropped as stale around a move"
		}
		return "shardcast: messages dropped: a worker queue was full (the Handler is slower than the traffic)"
	case shardcast.EventTopologyChanged:
		return "shardcast: topology changed"
	case shardcast.EventError:
		return "shardcast: background error; the broker retries"
	case shardcast.EventHotChannel:
		return "shardcast: hot channel"
	case shardcast.EventRelayout:
		return "shardcast: re-layout step"
	}
	return "shardcast: " + ev.Kind.String()
}

// eventLevel is the level an event is logged at: losses, errors and a
// re-layout step that could not keep order at warn (an operator acts on
// them), their ends, topology changes, hot channels and the other
// re-layout steps at info. A broker in a steady state raises none of the
// warn kinds.
func eventLevel(ev shardcast.Event) slog.Level {
	switch ev.Kind {
	case shardcast.EventInterrupted, shardcast.EventDropped, shardcast.EventError:
		return slog.LevelWarn
	case shardcast.EventRelayout:
		if ev.Err != nil {
			return slog.LevelWarn
		}
	}
	return slog.LevelInfo
}
