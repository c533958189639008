package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"

	"github.com/shardcast/shardcast/internal/engine"
	"github.com/shardcast/shardcast/internal/pubconn"
	"github.com/shardcast/shardcast/internal/resp"
)

// errNoMaster is the error of a resend that found no master to go to.
var errNoMaster = fmt.Errorf("%w: no master known for the slot", pubconn.ErrNotSent)

// resendable reports whether a command of partition p that failed with
// err certainly did not run (it never left, or a master redirected it:
// see redirection) and ctx still allows sending it again.
func resendable(ctx context.Context, err error, p int) bool {
	if ctx.Err() != nil {
		return false
	}
	_, redirected := redirection(err, p)
	return redirected || errors.Is(err, pubconn.ErrNotSent)
}

// redirects is the engine.Redirects of a command of partition p: it
// follows a MOVED or ASK naming p's slot (see redirection) on the
// broker's publishing connection to the node named (opened if the broker
// has none), takes a migration half done (refusedForNow) as a refusal for
// now, and resends a command that did not leave to whichever master the
// route names by then (the topology loop, kicked by the caller, may have
// found the new owner), or to any master when there is none: its MOVED
// names the owner.
type redirects struct {
	b *Broker
	p int
}

func (r redirects) Redirection(err error) (addr string, ask, ok bool) {
	rd, ok := redirection(err, r.p)
	return rd.Addr, rd.Ask, ok
}

func (r redirects) PubFor(addr string, from *pubconn.Pub) *pubconn.Pub {
	if host, port, _ := net.SplitHostPort(addr); host == "" && from != nil {
		// The node does not know its endpoint: it is reached at the host
		// of the one that answered.
		h, _, _ := net.SplitHostPort(from.Addr())
		addr = net.JoinHostPort(h, port)
	}
	return r.b.pubFor(addr)
}

func (r redirects) RefusedForNow(err error) bool { return refusedForNow(err) }

func (r redirects) Reroute() (*pubconn.Pub, error) {
	if pub := r.b.routeOf(r.p); pub != nil {
		return pub, nil
	}
	if pub := r.b.anyPub(); pub != nil {
		return pub, nil
	}
	return nil, errNoMaster
}

// refusals are the replies by which Redis Cluster refuses a command
// without running it, for a while: TRYAGAIN (a multi-key command during a
// slot migration, on the node its redirection led to) and CLUSTERDOWN,
// whole, as the server writes them. A script can reply any error of its
// own, so matching the code alone would run again a script that ran.
var refusals = []string{
	"TRYAGAIN Multiple keys request during rehashing of slot",
	"CLUSTERDOWN The cluster is down",
	"CLUSTERDOWN Hash slot not served",
	"CLUSTERDOWN The cluster is down and only accepts read commands",
}

// refusedForNow reports whether err is one of the refusals, or LOADING (a
// master loading its data set: "LOADING <server> is loading the dataset
// in memory", where Valkey names itself).
func refusedForNow(err error) bool {
	se, ok := resp.IsServerError(err)
	if !ok {
		return false
	}
	if slices.Contains(refusals, se.Msg) {
		return true
	}
	server, ok := strings.CutPrefix(se.Msg, "LOADING ")
	server, ok2 := strings.CutSuffix(server, " is loading the dataset in memory")
	return ok && ok2 && server != "" && !strings.Contains(server, " ")
}

// redirection returns the MOVED or ASK reply err holds for a command of
// partition p: one that names p's slot. Redis names the slot of the
// command's keys; an error that names another slot is a script's own
// reply, and following it would run the script again, elsewhere.
func redirection(err error, p int) (resp.Redirect, bool) {
	se, ok := resp.IsServerError(err)
	if !ok {
		return resp.Redirect{}, false
	}
	r, ok := se.Redirect()
	if !ok || r.Slot != wide.Slot(p) {
		return resp.Redirect{}, false
	}
	return r, true
}

// routeOf returns the publishing connection of partition p's master, or
// nil while the slot map names none (or the topology does not reach p
// yet: a re-layout's new partitions until the next slot-map pass).
func (b *Broker) routeOf(p int) *pubconn.Pub {
	route := b.route.Load()
	if route == nil || p >= len(*route) {
		return nil
	}
	return (*route)[p]
}

// anyPub returns one of the broker's publishing connections, or nil.
func (b *Broker) anyPub() *pubconn.Pub {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, pub := range b.pubs {
		return pub
	}
	return nil
}

// pubFor returns the broker's publishing connection to the node at addr,
// and makes one (it dials on first use) when the broker has none: a
// redirection or a slot map named a master the route does not know yet.
// The next slot-map update keeps it if the node owns partitions by then,
// and retires it otherwise. It returns nil once Close has begun.
func (b *Broker) pubFor(addr string) *pubconn.Pub {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.stopping {
		return nil
	}
	return b.pubForLocked(addr)
}

// pubForLocked is pubFor for a caller that holds b.mu.
func (b *Broker) pubForLocked(addr string) *pubconn.Pub {
	pub := b.pubs[addr]
	if pub == nil {
		t := engine.PubTimeouts(b.cfg.Conn)
		t.Stall = b.cfg.Conn.HealthInterval
		pub = pubconn.New(b.cfg.dialer(addr), t)
		pub.SetOnStall(func() { b.stalled(pub) })
		b.pubs[addr] = pub
	}
	return pub
}
