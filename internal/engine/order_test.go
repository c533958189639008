package engine

import (
	"slices"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/envelope"
	"github.com/shardcast/shardcast/internal/subconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestOrderFence: after a failover move, a message published before one
// of its channel already taken is refused, each channel on its own, until
// the fence expires; a path that never moved, or whose slot migrated to
// another shard, takes everything.
func TestOrderFence(t *testing.T) {
	p := newPath(0)
	a, b := &Link{}, &Link{}
	p.setOwner(a)
	assert.True(t, p.order.admit("x", 200))
	assert.True(t, p.order.admit("x", 100), "no order fence without a failover")

	p.failover.Store(true)
	p.setOwner(b)
	require.True(t, p.order.armed())
	// The reader passes views of its buffer: the fence keeps copies.
	buf := []byte("x")
	assert.True(t, p.order.admit(unsafe.String(unsafe.SliceData(buf), len(buf)), 300), "the first message of a channel")
	buf[0] = 'z' // the reader's next message
	assert.False(t, p.order.admit("x", 250), "published before the channel's last one: relayed late")
	assert.True(t, p.order.admit("y", 250), "each channel is judged on its own")
	assert.True(t, p.order.admit("x", 300), "equal publish times cannot be ordered")
	assert.True(t, p.order.admit("x", 400))
	assert.False(t, p.order.admit("x", 350))
	assert.False(t, p.order.admit("y", 249))

	p.order.until.Store(time.Now().Add(-time.Nanosecond).UnixNano())
	assert.True(t, p.order.admit("x", 1), "an expired fence takes everything")
	assert.False(t, p.order.armed(), "and is down")

	migrated := newPath(1)
	migrated.setOwner(a)
	migrated.setOwner(b)
	assert.False(t, migrated.order.armed(), "a slot migrated to another shard brings no late relays")
}

// TestOrderFenceExtends: the fence runs from the move's confirmation: an
// activation after a slow resubscribe keeps it up for a whole span.
func TestOrderFenceExtends(t *testing.T) {
	var f orderFence
	start := time.Now()
	f.arm(start, time.Second)
	f.extend(start.Add(5*time.Second), time.Second)
	assert.Equal(t, start.Add(6*time.Second).UnixNano(), f.until.Load())
	f.extend(start, time.Second)
	assert.Equal(t, start.Add(6*time.Second).UnixNano(), f.until.Load(), "extend never shortens")

	var down orderFence
	down.extend(start, time.Second)
	assert.False(t, down.armed(), "extend does not arm")
}

// TestOvertakenReported: a message the order fence drops never reaches the
// Handler, is counted in Stats.Stale and is reported by an EventDropped
// that names its channel and partition, whose window is the dropped
// messages' publish times and whose Err says why.
func TestOvertakenReported(t *testing.T) {
	c, rec := newRecordingCore()
	old, promoted := &Link{Addr: "old:1"}, &Link{Addr: "new:1"}
	r := &movingRouter{links: []*Link{old, promoted}}
	c.SetRouter(r)
	p := c.Paths[2]
	p.setOwner(old)
	p.failover.Store(true)
	p.setOwner(promoted)

	base := time.Now().Truncate(time.Microsecond)
	at := func(ms int) time.Time { return base.Add(time.Duration(ms) * time.Millisecond) }
	deliver := func(ch string, ms int, body string) {
		c.DeliverFrom(promoted, 2, ch, envelope.Append(nil, at(ms), []byte(body)))
	}
	deliver("a", 10, "a10") // sent to the new master directly
	deliver("a", 5, "a5")   // sent earlier to the old one, relayed late
	deliver("b", 3, "b3")   // another channel, in its own order
	deliver("a", 7, "a7")
	deliver("a", 11, "a11")
	c.Close(func() {})

	got, events := rec.result()
	assert.ElementsMatch(t, []string{"a=a10", "b=b3", "a=a11"}, got)
	assert.Equal(t, uint64(2), c.Stats().Stale)
	var dropped []shardcast.Event
	for _, ev := range events {
		if ev.Kind == shardcast.EventDropped {
			dropped = append(dropped, ev)
		}
	}
	require.Len(t, dropped, 1, "one report for drops close together")
	ev := dropped[0]
	assert.Equal(t, "new:1", ev.Shard)
	assert.Equal(t, []string{"a"}, ev.Channels)
	assert.Equal(t, []int{2}, ev.Partitions)
	assert.Equal(t, uint64(2), ev.Count)
	assert.True(t, ev.Since.Equal(at(5)), "since %v", ev.Since)
	assert.True(t, ev.Until.Equal(at(7).Add(envelope.Resolution-time.Nanosecond)), "until %v: the last stamp, to its resolution", ev.Until)
	assert.ErrorIs(t, ev.Err, shardcast.ErrPartitionMoved)
}

// TestStaleDropsReported: after a failover move, a copy the old link
// delivers (it is no longer the path's owner) and a message the move fence
// drops (stamped before the old link's last delivery) never reach the
// Handler twice or late, and both are reported by an EventDropped, so that
// a drop that was not a copy is never silent. A probe is not reported.
func TestStaleDropsReported(t *testing.T) {
	c, rec := newRecordingCore()
	old, promoted := &Link{Addr: "old:1"}, &Link{Addr: "new:1"}
	c.SetRouter(&movingRouter{links: []*Link{old, promoted}})
	p := c.Paths[1]
	base := time.Now().Truncate(time.Microsecond)
	at := func(ms int) time.Time { return base.Add(time.Duration(ms) * time.Millisecond) }
	deliver := func(l *Link, ch string, ms int, body string) {
		c.DeliverFrom(l, 1, ch, envelope.Append(nil, at(ms), []byte(body)))
	}
	p.setOwner(old)
	deliver(old, "a", 10, "a10")
	p.failover.Store(true)
	p.setOwner(promoted)
	deliver(old, "a", 11, "a11-old")  // the old wire, after the move
	deliver(promoted, "a", 10, "a10") // the relayed copy
	deliver(promoted, "b", 8, "b8")   // stamped before the old link's last, sent later
	deliver(promoted, "a", 12, "a12")
	c.Close(func() {})

	got, events := rec.result()
	assert.Equal(t, []string{"a=a10", "a=a12"}, got)
	assert.Equal(t, uint64(3), c.Stats().Stale)
	var dropped []shardcast.Event
	for _, ev := range events {
		if ev.Kind == shardcast.EventDropped {
			dropped = append(dropped, ev)
		}
	}
	require.NotEmpty(t, dropped)
	var count uint64
	var chans []string
	for _, ev := range dropped {
		count += ev.Count
		chans = append(chans, ev.Channels...)
		assert.ErrorIs(t, ev.Err, shardcast.ErrPartitionMoved)
		assert.Equal(t, []int{1}, ev.Partitions)
	}
	assert.EqualValues(t, 3, count)
	assert.ElementsMatch(t, []string{"a", "b"}, slices.Compact(slices.Sorted(slices.Values(chans))))
}

// recorded is what a core built by newRecordingCore handed over: the
// messages ("channel=payload", in handling order) and the events.
type recorded struct {
	mu     sync.Mutex
	got    []string
	events []shardcast.Event
}

// result returns what was recorded; read it after Close.
func (r *recorded) result() ([]string, []shardcast.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.got, r.events
}

// newRecordingCore returns a partitioned core of 4 paths whose Handler
// and OnEvent record into the returned recorded.
func newRecordingCore() (*Core, *recorded) {
	r := &recorded{}
	c := NewCore(CoreConfig{
		Options: shardcast.Options{
			Handler: func(m shardcast.Message) {
				r.mu.Lock()
				r.got = append(r.got, m.Channel+"="+string(m.Payload))
				r.mu.Unlock()
			},
			OnEvent: func(ev shardcast.Event) {
				r.mu.Lock()
				r.events = append(r.events, ev)
				r.mu.Unlock()
			},
		}.WithDefaults(),
		Conn:       shardcast.ConnOptions{}.WithDefaults(),
		Paths:      4,
		Partitions: true,
		Mode:       subconn.Sharded,
	})
	return c, r
}
