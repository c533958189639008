package engine

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/envelope"
)

// orderFence keeps each channel of a path in publish order for a while
// after a failover moved the path to the promoted replica.
//
// The demoted master takes SPUBLISH as a replica of its successor (Redis
// 7 serves it on a replica) and relays it over the cluster bus, where it
// can wait tens of milliseconds (measured on a 2-core host: median 7 ms,
// up to 40 ms, against 0.03 ms for a publish on the master). A publisher
// still routed to the old node is therefore overtaken, once it learns the
// new route, by its own next messages, which it sends to the successor
// directly: without the fence they are delivered before the older ones
// still on the bus. While armed, a message published before the latest
// one already taken on its channel is dropped, counted in Stats.Stale, and
// reported in an EventDropped (see lateReport): a loss the application is
// told of, instead of a reorder.
//
// Publish times come from the publishers' clocks. A channel with a single
// publisher is judged on one clock; on a channel several publishers share,
// a message that loses the race to Redis against one stamped later (by a
// clock ahead, or a moment later) is dropped and reported too, while the
// fence is armed: that is why it is armed only for a while after a
// failover, for the span publishers take to re-route (see NewCore).
type orderFence struct {
	// until is when the fence expires (Unix ns); 0 while disarmed. It is
	// read on every message, so it is the only field the disarmed path
	// touches.
	until atomic.Int64

	mu sync.Mutex
	// last holds, per channel, the latest publish time (Unix ns) taken
	// since the fence was armed. Keys are copies: the channel a reader
	// passes is a view of its read buffer.
	last map[string]*int64
}

// arm starts the fence, until span after now, and forgets what it took
// before.
func (f *orderFence) arm(now time.Time, span time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.last = make(map[string]*int64)
	f.until.Store(now.Add(span).UnixNano())
}

// extend keeps an armed fence up until at least span after now: a
// resubscribe that took long must not eat into it.
func (f *orderFence) extend(now time.Time, span time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if u := f.until.Load(); u != 0 && u < now.Add(span).UnixNano() {
		f.until.Store(now.Add(span).UnixNano())
	}
}

// armed reports whether the fence is up.
func (f *orderFence) armed() bool { return f.until.Load() != 0 }

// admit reports whether a message of channel published at ns (Unix ns)
// keeps the channel's order: always while the fence is down, and while it
// is up unless a message of the channel published later was taken.
// Equal times are taken: they cannot be ordered.
func (f *orderFence) admit(channel string, ns int64) bool {
	if f.until.Load() == 0 {
		return true
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	u := f.until.Load()
	if u == 0 {
		return true
	}
	if time.Now().UnixNano() >= u {
		f.until.Store(0)
		f.last = nil
		return true
	}
	if last := f.last[channel]; last != nil {
		if ns < *last {
			return false
		}
		*last = ns
		return true
	}
	v := ns
	f.last[strings.Clone(channel)] = &v
	return true
}

// errOvertaken is the Err of the EventDropped that reports messages a
// path dropped as stale around a move (see Core.reportStale).
var errOvertaken = fmt.Errorf("%w: dropped around a failover or slot move to keep delivery at most once and in order (a late copy from the old or the demoted node, or a message stamped before one already delivered; some may have been delivered from the new node)",
	shardcast.ErrPartitionMoved)

// lateReport gathers the messages paths dropped as stale and reports them:
// one EventDropped per node at most every lateReportDelay, naming the
// channels (up to maxLateChannels, then Truncated) and partitions, with
// Count and, as Since..Until, the earliest and latest publish times of the
// dropped messages: the loss window on the publishers' clocks, which is
// where the application looks for what it missed.
type lateReport struct {
	emit func(shardcast.Event)

	mu      sync.Mutex
	pending map[string]*lateWindow // by node address
	timer   *time.Timer            // set while a report is due
	closed  bool
}

// lateWindow is one node's drops since the last report.
type lateWindow struct {
	ev       shardcast.Event
	channels map[string]bool
	parts    map[int]bool
}

// lateReportDelay is how long drops are gathered before they are reported.
const lateReportDelay = 100 * time.Millisecond

// maxLateChannels caps Event.Channels of one report.
const maxLateChannels = 1000

// add records a message of channel, published at, that the order fence of
// partition part (-1: the engine has no partitions) dropped on the link
// to addr. channel may be a view of a read buffer.
func (r *lateReport) add(addr string, part int, channel string, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	// A stamp is truncated (envelope.Resolution): the message was
	// published up to that much after it, and the window must cover that.
	end := at.Add(envelope.Resolution - time.Nanosecond)
	w := r.pending[addr]
	if w == nil {
		if r.pending == nil {
			r.pending = make(map[string]*lateWindow)
		}
		w = &lateWindow{ev: shardcast.Event{Kind: shardcast.EventDropped, Shard: addr, Since: at, Until: end, Err: errOvertaken},
			channels: make(map[string]bool), parts: make(map[int]bool)}
		r.pending[addr] = w
	}
	w.ev.Count++
	if at.Before(w.ev.Since) {
		w.ev.Since = at
	}
	if end.After(w.ev.Until) {
		w.ev.Until = end
	}
	if !w.channels[channel] {
		if len(w.channels) < maxLateChannels {
			ch := strings.Clone(channel)
			w.channels[ch] = true
			w.ev.Channels = append(w.ev.Channels, ch)
		} else {
			w.ev.Truncated = true
		}
	}
	if part >= 0 && !w.parts[part] {
		w.parts[part] = true
		w.ev.Partitions = append(w.ev.Partitions, part)
	}
	if r.timer == nil {
		r.timer = time.AfterFunc(lateReportDelay, r.flush)
	}
}

// flush emits the pending reports. Events are emitted under the lock, so
// that close returns only once every report is queued on the emitter.
func (r *lateReport) flush() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.timer = nil
	addrs := make([]string, 0, len(r.pending))
	for addr := range r.pending {
		addrs = append(addrs, addr)
	}
	slices.Sort(addrs)
	for _, addr := range addrs {
		ev := r.pending[addr].ev
		slices.Sort(ev.Partitions)
		r.emit(ev)
	}
	clear(r.pending)
}

// close reports what is pending at once; later drops are not reported.
// Call it once no reader can drop a message any more.
func (r *lateReport) close() {
	r.mu.Lock()
	r.closed = true
	if r.timer != nil {
		r.timer.Stop()
	}
	r.mu.Unlock()
	r.flush()
}
