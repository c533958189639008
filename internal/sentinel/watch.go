package sentinel

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardcast/shardcast/internal/subconn"
)

// The Sentinel events Watch subscribes to: a master moved, and a failover
// began (a leader tries one; it promotes a replica).
const (
	switchMaster = "+switch-master"
	tryFailover  = "+try-failover"
	promoting    = "+failover-state-send-slaveof-noone"
)

// relisten is how long a watch waits before it reconnects to a Sentinel
// whose subscription it lost.
const relisten = time.Second

// Watch follows the master until ctx ends, starting from current: it
// subscribes to every Sentinel's failover events and asks them where the
// master is every interval and at once when one announces a switch. When
// the answer differs from the master it followed, it calls moved with the
// new address and with since, the earliest moment the new master may have
// taken writes: when a Sentinel was first heard beginning the failover,
// or, if none was (a listener was reconnecting), when the last ask that
// still named the old master began; no publisher could have been told of
// the new one before the Sentinels were (zero before any such ask).
// moved runs on the watch's goroutine, one call at a time. Watch returns
// once its goroutines have.
func (g *Group) Watch(ctx context.Context, current string, every time.Duration, moved func(addr string, since time.Time)) {
	w := &watch{g: g, kick: make(chan struct{}, 1)}
	var wg sync.WaitGroup
	for _, a := range g.addrs {
		wg.Go(func() { w.listen(ctx, a) })
	}
	defer wg.Wait()
	t := time.NewTicker(every)
	defer t.Stop()
	var lastOld time.Time // when the last ask that named current began
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-w.kick:
		}
		asked := time.Now()
		addr, err := g.Ask(ctx)
		if err != nil {
			continue
		}
		if addr == current {
			lastOld = asked
			continue
		}
		current = addr
		since := lastOld
		if ns := w.failing.Swap(0); ns != 0 {
			since = time.Unix(0, ns)
		}
		moved(addr, since)
	}
}

// watch is one Watch call's state shared with its listeners.
type watch struct {
	g    *Group
	kick chan struct{}
	// failing is when a failover of the master was first heard of since
	// the last move (Unix ns, 0 if none).
	failing atomic.Int64
}

// listen keeps a subscription to the failover events of the Sentinel at
// addr until ctx ends.
func (w *watch) listen(ctx context.Context, addr string) {
	d := w.g.dial
	d.Addr = addr
	for ctx.Err() == nil {
		c, err := subconn.Open(ctx, d, subconn.Classic, subconn.Hooks{OnMessage: w.event})
		if err == nil {
			errs := c.Subscribe(ctx, []string{switchMaster, tryFailover, promoting})
			if errs[0] == nil {
				select {
				case <-ctx.Done():
				case <-c.Done():
				}
			}
			c.Close()
		}
		t := time.NewTimer(relisten)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
}

// event takes one Sentinel event, on a listener's reader: a failover's
// start is dated, a switch makes the watch ask at once.
func (w *watch) event(channel string, payload []byte) {
	f := strings.Fields(string(payload))
	switch channel {
	case switchMaster:
		// <name> <old ip> <old port> <new ip> <new port>
		if len(f) >= 1 && f[0] == w.g.master {
			select {
			case w.kick <- struct{}{}:
			default:
			}
		}
	case tryFailover, promoting:
		// master <name> <ip> <port>, or
		// slave <ip:port> <ip> <port> @ <name> <ip> <port>
		if name(f) == w.g.master {
			w.failing.CompareAndSwap(0, time.Now().UnixNano())
		}
	}
}

// name returns the master an event's fields are about.
func name(f []string) string {
	if len(f) >= 2 && f[0] == "master" {
		return f[1]
	}
	for i, s := range f {
		if s == "@" && i+1 < len(f) {
			return f[i+1]
		}
	}
	return ""
}
