package shardcast

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"time"

	"github.com/shardcast/shardcast/internal/compact"
)

// Message is one delivered Pub/Sub message.
type Message struct {
	// Channel is the application channel name, without any partition tag
	// or prefix the engine adds on the wire.
	Channel string
	// Payload is the message body as published. Handlers must treat it as
	// read-only: engines may hand out memory shared with other fields. (The
	// engines here allocate Channel and Payload together, once per message,
	// so a Channel string kept past the handler keeps that message's
	// payload in memory too; clone it if that matters.) With
	// Options.ReusePayloads the Payload is valid only until the Handler
	// returns.
	Payload []byte
	// PublishedAt is the publisher's clock at Publish time, or the zero
	// time when the message carried no envelope (raw mode or a foreign
	// publisher).
	PublishedAt time.Time
}

// Handler receives delivered messages. Calls for one channel are made in
// order and never concurrently; calls for different channels may run in
// parallel on different workers.
type Handler func(Message)

// Broker is the contract both engines implement.
type Broker interface {
	// Publish sends payload to every subscriber of channel. It returns once
	// Redis accepted the command. An error does not mean the message was
	// not delivered: only one that wraps ErrNotSent says Redis never got
	// it. After any other error (a timeout, a connection lost while the
	// reply was due) the message may still be delivered, even after newer
	// messages of its channel, so resending it can deliver it twice.
	Publish(ctx context.Context, channel string, payload []byte) error
	// Subscribe adds channels to the broker's subscriptions and returns
	// once Redis has confirmed every one of them. It is idempotent. If the
	// path to Redis is down it waits, bounded by ctx, and never reports a
	// channel Redis has not confirmed.
	Subscribe(ctx context.Context, channels ...string) error
	// Unsubscribe removes channels from the broker's subscriptions. It is
	// idempotent.
	Unsubscribe(ctx context.Context, channels ...string) error
	// Close releases every connection and stops every goroutine the broker
	// started. Calls after Close return ErrClosed.
	Close() error
}

// EventKind tells what an Event reports.
type EventKind int

const (
	// EventInterrupted reports that subscriptions stopped receiving: a
	// connection dropped, a slot moved or a node failed. Messages published
	// to the named channels from Since on may be lost.
	EventInterrupted EventKind = iota + 1
	// EventRestored reports that previously interrupted subscriptions are
	// confirmed by Redis again, or that interrupted channels left their
	// interruption (unsubscribed, or moved by a re-layout to a path that
	// carries them). Since..Until is the gap during which messages may
	// have been lost.
	EventRestored
	// EventDropped reports messages dropped because a worker queue was
	// full (the handler was slower than the publish rate; Err is nil), or
	// dropped as stale around a failover or slot move (see Stats.Stale):
	// Err then wraps ErrPartitionMoved, and Since..Until spans their
	// publish times, on the publishers' clocks. Most stale drops are copies
	// of messages the new node delivered too, so such a report may name
	// messages the Handler did get; it is never left out for one it did
	// not.
	EventDropped
	// EventTopologyChanged reports that partitions moved between Redis
	// masters, or masters were added or removed.
	EventTopologyChanged
	// EventError reports an error the broker hit in the background and
	// will retry, such as a failed reconnect.
	EventError
	// EventHotChannel reports that, over the hot-channel window that just
	// ended (Since..Until), one channel certainly carried more than
	// Options.HotShare of the sampled traffic the broker exchanged with
	// one node in one direction: Channels holds that channel, Shard the
	// node ("" for publishes whose node the broker does not know, see
	// HotChannel.Node) and Count the estimated number of its messages in
	// the window. HotChannels on the engines tells the direction apart.
	EventHotChannel
	// EventRelayout reports a step of an online re-layout (see
	// docs/RELAYOUT.md): Phase names it (one of the Phase constants),
	// Since is when the broker began it, Until when it completed it, and
	// Count how many of the broker's subscribed channels move. A hand-over
	// that could not keep order (PhaseBarrierTimeout, PhaseHandoverFull,
	// PhaseStalled) names its channels and wraps ErrRelayoutOrder in Err:
	// their messages were all delivered once, but those of the moment of
	// the switch maybe out of order.
	EventRelayout
)

// String returns the kind's name.
func (k EventKind) String() string {
	switch k {
	case EventInterrupted:
		return "interrupted"
	case EventRestored:
		return "restored"
	case EventDropped:
		return "dropped"
	case EventTopologyChanged:
		return "topology_changed"
	case EventError:
		return "error"
	case EventHotChannel:
		return "hot_channel"
	case EventRelayout:
		return "relayout"
	}
	return fmt.Sprintf("EventKind(%d)", int(k))
}

// Event reports something the application may need to act on, typically a
// window in which messages may have been lost so that it can tell its own
// clients to recover.
type Event struct {
	// Kind tells what happened, and which of the fields below are set.
	Kind EventKind
	// Shard names the Redis instance or master the event concerns
	// (host:port), if any.
	Shard string
	// Channels lists the application channels affected. For EventDropped it
	// holds the distinct channels that lost messages in the window (capped;
	// see Truncated).
	Channels []string
	// Partitions lists the partitions affected (cluster engine).
	Partitions []int
	// Since is the start of the window the event covers.
	Since time.Time
	// Until is the end of the window; zero while it is still open.
	Until time.Time
	// Count is the number of messages the event concerns (EventDropped).
	Count uint64
	// Truncated is set when Channels was capped and does not list every
	// affected channel.
	Truncated bool
	// Err is the cause, when one is known.
	Err error
	// Phase names the re-layout step an EventRelayout reports.
	Phase string
}

// String renders the event for logs, on one line: partitions as ranges
// ("0-41,64", or a count past a few), channels as a count.
func (e Event) String() string {
	var b strings.Builder
	b.WriteString(e.Kind.String())
	if e.Phase != "" {
		fmt.Fprintf(&b, " phase=%s", e.Phase)
	}
	if e.Shard != "" {
		fmt.Fprintf(&b, " shard=%s", e.Shard)
	}
	if len(e.Channels) > 0 {
		fmt.Fprintf(&b, " channels=%d", len(e.Channels))
	}
	if len(e.Partitions) > 0 {
		b.WriteString(" partitions=")
		b.WriteString(compact.Ints(e.Partitions))
	}
	if e.Count > 0 {
		fmt.Fprintf(&b, " count=%d", e.Count)
	}
	if !e.Since.IsZero() && !e.Until.IsZero() {
		fmt.Fprintf(&b, " gap=%s", e.Until.Sub(e.Since))
	}
	if e.Err != nil {
		fmt.Fprintf(&b, " err=%v", e.Err)
	}
	return b.String()
}

// Options are the settings both engines share. The zero value is usable:
// every zero field takes its default.
type Options struct {
	// Handler receives messages. A broker without one is publish-only.
	Handler Handler
	// OnEvent, if set, receives every Event. It is called from a single
	// background goroutine per broker and should return quickly. A
	// channel's EventRestored always comes after the EventInterrupted of
	// the loss it ends, so the later of the two that names a channel says
	// whether its loss is over.
	OnEvent func(Event)
	// Workers is the number of handler goroutines (default 16). Messages of
	// one channel always go to the same worker.
	Workers int
	// QueueSize is the number of messages each worker can hold queued
	// before new ones are dropped (default 1024). A worker takes queued
	// messages in batches of up to 64, so it may hold up to
	// min(QueueSize, 64) more that it has taken and not handled yet.
	QueueSize int
	// SubscribeBatch is the most channels sent in one subscribe command
	// (default 512).
	SubscribeBatch int
	// MaxPayload is the largest payload Publish accepts, in bytes (default
	// 1 MiB). Keep it well below the servers' output-buffer limit for
	// Pub/Sub clients, client-output-buffer-limit pubsub (32 MB hard and
	// 8 MB for 60 s soft, by default): Redis disconnects a subscriber
	// whose unsent output passes that limit, so a single payload above the
	// hard limit makes Redis drop every subscriber of its channel, while
	// the publish itself succeeds; each subscriber then reconnects and
	// loses whatever was published meanwhile. Raise the servers' limit
	// before raising MaxPayload near it.
	MaxPayload int
	// MaxAsyncPublishes bounds the messages of PublishAsync (see
	// AsyncPublisher) in flight per broker (default
	// DefaultMaxAsyncPublishes); a call beyond it waits for room.
	MaxAsyncPublishes int
	// Raw disables the envelope: payloads go on the wire as they are and
	// Message.PublishedAt is zero. Use it to interoperate with publishers
	// or subscribers that are not shardcast. Both sides must agree.
	Raw bool
	// Logger receives the broker's log: every Event, one line each (see
	// OnEvent), losses, drops and background errors at Warn, restorations,
	// topology changes and re-layout steps at Info, and the few conditions
	// that raise no event (a failed health ping, the layout record turned
	// off) with their cause. A broker in a steady state logs nothing at
	// Warn. Default: slog.Default() as it is when New runs; use
	// slog.New(slog.DiscardHandler) for silence.
	Logger *slog.Logger
	// ReusePayloads lets the broker reuse the memory of a received
	// message's Payload for a later message once the Handler has returned
	// from it, which saves an allocation per message, and the garbage
	// collection it causes. Set it only for a Handler that never keeps
	// Message.Payload, nor any slice of it, after it returns (one that
	// needs the bytes later copies them), or it will see them change.
	// Message.Channel and PublishedAt stay safe to keep. The broker then
	// keeps recycled buffers for later messages: at most 256 of at most
	// 16 KiB per worker and per subscribe connection (larger payloads
	// are allocated as usual), and 4,096 channel names per subscribe
	// connection. Default false: every message's Payload is memory of its
	// own.
	ReusePayloads bool
	// InlineHandling lets a subscribe connection's read loop call the
	// Handler itself for a message whose worker is idle (asleep, with
	// nothing queued), instead of queueing it and waking the worker; a
	// message for a busy worker is queued as usual. This saves the
	// worker's wake-up and the switch to it, which is most of what a
	// message costs the broker when messages arrive one or a few per
	// read (BenchmarkFeederHandOff: a fifth of the cost per message when
	// each read returns one), and the wait for the worker to be
	// scheduled. The read loop does not
	// read while the Handler runs, so set it only for a Handler that
	// returns within microseconds and never waits for this broker: a
	// Subscribe, Unsubscribe or Close called from the Handler would wait
	// for the read loop that runs it. With ReusePayloads, a Payload
	// handed over this way is the read buffer itself, valid until the
	// Handler returns, as ReusePayloads promises. Calls for one channel
	// stay in order and never overlap. Default false: the Handler runs on
	// the workers only.
	InlineHandling bool

	// HotSampleRate is the fraction of messages, published and received,
	// that hot-channel detection samples (default 0.01, at most 1). A
	// negative value turns detection off: HotChannels then returns nil and
	// no EventHotChannel is raised. The sampling decision is a few
	// nanoseconds per message; only sampled messages take a lock.
	HotSampleRate float64
	// HotWindow is the period over which sampled messages are counted
	// before the top channels are reported and the counts start afresh
	// (default one minute).
	HotWindow time.Duration
	// HotTopK is how many channels are counted per node and direction,
	// and the most HotChannels returns (default 32). Memory is fixed by
	// it, whatever the number of channels: a channel that carries more
	// than 1/HotTopK of a node's traffic is always among those counted.
	HotTopK int
	// HotShare is the share of one node's sampled traffic in one
	// direction above which a channel raises EventHotChannel at the end
	// of a window (default 0.2, at most 1; negative: never). Nodes with
	// fewer than HotMinSamples sampled messages in the window raise none.
	HotShare float64
}

// WithDefaults returns a copy of o with every zero field set to its
// default. Negative values are reported by Validate.
func (o Options) WithDefaults() Options {
	if o.Workers == 0 {
		o.Workers = DefaultWorkers
	}
	if o.QueueSize == 0 {
		o.QueueSize = DefaultQueueSize
	}
	if o.SubscribeBatch == 0 {
		o.SubscribeBatch = DefaultSubscribeBatch
	}
	if o.MaxPayload == 0 {
		o.MaxPayload = DefaultMaxPayload
	}
	if o.MaxAsyncPublishes == 0 {
		o.MaxAsyncPublishes = DefaultMaxAsyncPublishes
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.HotSampleRate == 0 {
		o.HotSampleRate = DefaultHotSampleRate
	}
	if o.HotWindow == 0 {
		o.HotWindow = DefaultHotWindow
	}
	if o.HotTopK == 0 {
		o.HotTopK = DefaultHotTopK
	}
	if o.HotShare == 0 {
		o.HotShare = DefaultHotShare
	}
	return o
}

// Validate reports a setting that cannot work, wrapped in ErrInvalidConfig.
func (o Options) Validate() error {
	switch {
	case o.Workers < 0:
		return fmt.Errorf("%w: Workers = %d, want >= 0", ErrInvalidConfig, o.Workers)
	case o.QueueSize < 0:
		return fmt.Errorf("%w: QueueSize = %d, want >= 0", ErrInvalidConfig, o.QueueSize)
	case o.SubscribeBatch < 0:
		return fmt.Errorf("%w: SubscribeBatch = %d, want >= 0", ErrInvalidConfig, o.SubscribeBatch)
	case o.MaxPayload < 0:
		return fmt.Errorf("%w: MaxPayload = %d, want >= 0", ErrInvalidConfig, o.MaxPayload)
	case o.MaxAsyncPublishes < 0:
		return fmt.Errorf("%w: MaxAsyncPublishes = %d, want >= 0", ErrInvalidConfig, o.MaxAsyncPublishes)
	case o.HotSampleRate > 1 || math.IsNaN(o.HotSampleRate):
		return fmt.Errorf("%w: HotSampleRate = %v, want <= 1 (negative: off)", ErrInvalidConfig, o.HotSampleRate)
	case o.HotWindow < 0:
		return fmt.Errorf("%w: HotWindow = %v, want >= 0", ErrInvalidConfig, o.HotWindow)
	case o.HotTopK < 0:
		return fmt.Errorf("%w: HotTopK = %d, want >= 0", ErrInvalidConfig, o.HotTopK)
	case o.HotShare > 1 || math.IsNaN(o.HotShare):
		return fmt.Errorf("%w: HotShare = %v, want <= 1 (negative: no events)", ErrInvalidConfig, o.HotShare)
	}
	return nil
}

// ValidateChannel reports ErrInvalidChannel for a channel no engine can
// carry. Any non-empty byte string is a valid channel, including ones that
// contain '{' or '}': the partition tag always comes first on the wire, and
// Redis hashes only the first {...} of a key. Channels that begin with
// "shardcast.probe:" carry the engines' delivery probes, which never reach
// the Handler: applications should not use them.
func ValidateChannel(channel string) error {
	if channel == "" {
		return fmt.Errorf("%w: empty channel name", ErrInvalidChannel)
	}
	return nil
}

// Stats are cumulative counters a broker exposes for metrics.
type Stats struct {
	// Published counts Publish (and PublishAsync) calls Redis accepted.
	Published uint64
	// Received counts messages read from Redis, delivery probes included.
	Received uint64
	// Delivered counts messages the Handler returned from. A worker adds
	// its calls every few of them (at most 8) and at the end of each
	// batch it takes, so the count may trail its last few calls.
	Delivered uint64
	// Dropped counts messages lost to full worker queues.
	Dropped uint64
	// BadFrames counts received messages that did not decode as an
	// envelope; they are delivered as they are, with a zero PublishedAt.
	BadFrames uint64
	// Channels is the number of channels currently subscribed (wanted).
	Channels int
	// Reconnects counts subscribe connections re-established after a loss.
	Reconnects uint64
	// Stale counts messages dropped around a move, each reported by an
	// EventDropped: those that arrived on a connection their partition had
	// moved away from (after a failover or a slot move the old node may
	// deliver for a moment what the new one delivers too), and, for
	// 2 × HealthInterval after a failover, those published no later than
	// the old connection's last message (copies relayed by the cluster
	// bus) or behind a later message of their channel (kept in order).
	Stale uint64
	// QueueDepth is the number of messages waiting in worker queues now,
	// summed over workers (a worker busy with fast calls may still count
	// up to 7 it has handed to the Handler).
	QueueDepth int
	// QueueHighWater is the deepest any one worker queue has been since
	// the broker started; messages are dropped once it reaches
	// Options.QueueSize.
	QueueHighWater int
}

// LatencyStats are the histograms of a broker's deliveries since it
// started. Engines return them from a Latency method next to Stats: Stats
// stays a few counters, cheap to poll in a loop, while a snapshot of the
// histograms allocates a few tens of kilobytes.
type LatencyStats struct {
	// Lag is the time from Publish (Message.PublishedAt, the publisher's
	// clock) to the moment a worker took the message off its queue, just
	// before the Handler: the publish, Redis, the network, the read loop
	// and the wait in the queue. While handler calls take under 2µs a
	// worker reads the clock once per 8 of them, so a lag may be short by
	// the calls just before it (about 14µs at most); slower calls have
	// the clock read before every message. Messages with a zero PublishedAt (raw
	// mode, foreign publishers) are not in it. Between hosts it includes
	// their clock difference; a subscriber whose clock is behind the
	// publisher's records negative lags, counted in Lag.Negative. A
	// worker adds its lags to the histogram where it reads the clock and
	// at the end of each batch, with its Delivered count, so a snapshot
	// may miss the lags of its last few calls (at most 8), never those of
	// messages Stats.Delivered already counts.
	Lag HistogramSnapshot
	// HandlerTime is how long Handler calls took, for calls that returned
	// (a panicking call is counted in no histogram). Calls under 2µs are
	// sampled (the first of each batch a worker takes from its queue, then
	// about one in 8), so Count can be below the number delivered; from
	// the first call of 2µs or more in a batch, every call is timed.
	HandlerTime HistogramSnapshot
}
