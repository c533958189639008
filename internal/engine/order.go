package engine

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardcast/shardcast"
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
