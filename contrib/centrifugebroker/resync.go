package centrifugebroker

import (
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/centrifugal/centrifuge"
	"github.com/shardcast/shardcast"
)

// insufficientState is what a client is told when messages of its channel
// may have been lost: Centrifuge's own code for it, on which client SDKs
// resubscribe at once (codes >= 2500 mean "resubscribe").
var insufficientState = centrifuge.Unsubscribe{Code: centrifuge.UnsubscribeCodeInsufficient, Reason: "insufficient state"}

// onEvent is the shardcast OnEvent callback. It only records and queues:
// the unsubscribes run on the resync goroutine.
func (b *Broker) onEvent(ev shardcast.Event) {
	switch ev.Kind {
	case shardcast.EventInterrupted:
		b.log.Warn("centrifugebroker: subscriptions interrupted, telling their clients to resubscribe", "event", ev.String())
		b.resync.interrupted(b.clientChannels(ev.Channels, true))
	case shardcast.EventRestored:
		b.log.Info("centrifugebroker: subscriptions restored", "event", ev.String())
		b.resync.restored(b.clientChannels(ev.Channels, false))
		if mb := b.maps.Load(); mb != nil {
			mb.lost(ev.Channels, false)
		}
	case shardcast.EventDropped:
		b.log.Warn("centrifugebroker: messages dropped (a full worker queue, or late copies after a failover), telling their clients to resubscribe",
			"event", ev.String(), "channels_truncated", ev.Truncated)
		channels := b.clientChannels(ev.Channels, true)
		if mb := b.maps.Load(); mb != nil {
			mb.lost(ev.Channels, ev.Truncated)
		}
		if ev.Truncated {
			// The list names only some of the channels that lost
			// messages: every channel with local subscribers may have.
			b.resync.lostAll()
			return
		}
		b.resync.lost(channels)
	}
}

// clientChannels returns channels without the control channel, and says
// when control messages may have been lost. The channels of map channels
// become the map channels' names, which their clients subscribed to.
func (b *Broker) clientChannels(channels []string, lost bool) []string {
	out := make([]string, 0, len(channels))
	mb := b.maps.Load()
	for _, ch := range channels {
		if ch == b.control {
			if lost {
				b.log.Warn("centrifugebroker: control messages may have been lost", "channel", ch)
			}
			continue
		}
		if mb != nil {
			ch = strings.TrimPrefix(ch, mb.prefix)
		}
		out = append(out, ch)
	}
	return out
}

// resync unsubscribes the local clients of channels that may have lost
// messages with the insufficient-state code, so that they resubscribe.
//
// It does so when an EventInterrupted names the channels, and again when
// the EventRestored for them arrives, for the clients that subscribed in
// between without the node's Subscribe having waited for Redis: when a
// channel keeps a local subscriber throughout, Centrifuge does not call
// Broker.Subscribe for a newcomer, so the newcomer may have missed
// messages too. A channel is marked at the interruption; a Broker.Subscribe
// that started after the mark and succeeded proves Redis holds the channel
// again, and clears it. Channels still marked at the restore are swept.
type resync struct {
	hub *centrifuge.Hub
	log *slog.Logger

	mu     sync.Mutex
	gen    uint64            // bumped at every interruption
	marked map[string]uint64 // channel → gen of its interruption
	queue  []string          // channels to sweep
	all    bool              // sweep every channel with local subscribers

	wake chan struct{} // holds at most one pending wake-up
	quit chan struct{}
	done chan struct{}

	unsubscribed atomic.Uint64
	disconnected atomic.Uint64
}

func startResync(hub *centrifuge.Hub, log *slog.Logger) *resync {
	r := &resync{
		hub:    hub,
		log:    log,
		marked: make(map[string]uint64),
		wake:   make(chan struct{}, 1),
		quit:   make(chan struct{}),
		done:   make(chan struct{}),
	}
	go r.run()
	return r
}

// begin returns the generation a Subscribe starts in, for confirmed.
func (r *resync) begin() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.gen
}

// confirmed records that Redis confirmed channels for a Subscribe that
// began in generation since.
func (r *resync) confirmed(channels []string, since uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ch := range channels {
		if g, ok := r.marked[ch]; ok && g <= since {
			delete(r.marked, ch)
		}
	}
}

// isInterrupted reports whether ch is marked: interrupted and not yet
// known to be restored.
func (r *resync) isInterrupted(ch string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.marked[ch]
	return ok
}

// forget drops the marks of channels the node unsubscribed.
func (r *resync) forget(channels []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ch := range channels {
		delete(r.marked, ch)
	}
}

// interrupted marks channels and sweeps their clients.
func (r *resync) interrupted(channels []string) {
	if len(channels) == 0 {
		return
	}
	r.mu.Lock()
	r.gen++
	for _, ch := range channels {
		r.marked[ch] = r.gen
	}
	r.queue = append(r.queue, channels...)
	r.mu.Unlock()
	r.signal()
}

// restored sweeps the clients of channels still marked.
func (r *resync) restored(channels []string) {
	r.mu.Lock()
	n := len(r.queue)
	for _, ch := range channels {
		if _, ok := r.marked[ch]; ok {
			delete(r.marked, ch)
			r.queue = append(r.queue, ch)
		}
	}
	queued := len(r.queue) > n
	r.mu.Unlock()
	if queued {
		r.signal()
	}
}

// lost sweeps the clients of channels, unmarked: no restore follows.
func (r *resync) lost(channels []string) {
	if len(channels) == 0 {
		return
	}
	r.mu.Lock()
	r.queue = append(r.queue, channels...)
	r.mu.Unlock()
	r.signal()
}

// lostAll sweeps the clients of every channel with local subscribers: an
// event whose channel list was cut short.
func (r *resync) lostAll() {
	r.mu.Lock()
	r.all = true
	r.mu.Unlock()
	r.signal()
}

func (r *resync) signal() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// stop ends the goroutine and waits for it. Sweeps still queued are
// dropped: the node is going away.
func (r *resync) stop() {
	close(r.quit)
	<-r.done
}

func (r *resync) run() {
	defer close(r.done)
	for {
		select {
		case <-r.quit:
			return
		case <-r.wake:
		}
		r.mu.Lock()
		queue, all := r.queue, r.all
		r.queue, r.all = nil, false
		r.mu.Unlock()
		if all {
			queue = r.hub.Channels()
		}
		r.sweep(queue)
	}
}

// sweep unsubscribes every local client of channels with the
// insufficient-state code, and disconnects with it a client subscribed to
// one of them server-side (see serverSide), which reconnects.
func (r *resync) sweep(channels []string) {
	set := make(map[string]struct{}, len(channels))
	for _, ch := range channels {
		if r.hub.NumSubscribers(ch) > 0 {
			set[ch] = struct{}{}
		}
	}
	if len(set) == 0 {
		return
	}
	var n, d uint64
	defer func() {
		if n+d == 0 {
			return
		}
		r.unsubscribed.Add(n)
		r.disconnected.Add(d)
		r.log.Info("centrifugebroker: told clients to resubscribe", "channels", len(set), "subscriptions", n, "disconnected", d)
	}()
	for _, c := range r.hub.Connections() {
		select {
		case <-r.quit:
			return
		default:
		}
		var affected []string
		disconnect := false
		for ch, cc := range c.ChannelsWithContext() {
			if _, ok := set[ch]; !ok {
				continue
			}
			affected = append(affected, ch)
			if side, known := serverSide(cc); side || !known {
				disconnect = true
			}
		}
		if disconnect {
			c.Disconnect(centrifuge.DisconnectInsufficientState)
			d++
			continue
		}
		for _, ch := range affected {
			c.Unsubscribe(ch, insufficientState)
			n++
		}
	}
}
