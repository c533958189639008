// Package sentinel asks Redis Sentinels where a master is and hears when
// it moves. It is wire-level: it knows Sentinel's commands and events, not
// the engines that follow them.
package sentinel

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/shardcast/shardcast/internal/pubconn"
	"github.com/shardcast/shardcast/internal/subconn"
)

// ErrNoAnswer is Ask's error when no Sentinel named the master.
var ErrNoAnswer = errors.New("sentinel: no Sentinel named the master")

// Group is the Sentinels that monitor one master. Its methods are safe for
// concurrent use.
type Group struct {
	master string
	addrs  []string
	dial   subconn.Dialer
	pubs   []*pubconn.Pub

	mu sync.Mutex
	// known is the master the Sentinels named last, and epoch the config
	// epoch they gave with it: an answer of an older epoch is a Sentinel
	// that has not yet heard of a failover.
	known string
	epoch int64
}

// New returns the group of the Sentinels at addrs (host:port) that know
// the master as master. Connections are dialled with d (its timeout,
// credentials and TLS; Addr is set per Sentinel) on first use, and bounded
// by t.
func New(addrs []string, master string, d subconn.Dialer, t pubconn.Timeouts) *Group {
	g := &Group{master: master, addrs: addrs, dial: d}
	for _, a := range addrs {
		d := g.dial
		d.Addr = a
		g.pubs = append(g.pubs, pubconn.New(d, t))
	}
	return g
}

// Master returns the master's name.
func (g *Group) Master() string { return g.master }

// Ask asks every Sentinel at once where the master is and returns the
// answer of the highest config epoch, which a Sentinel that has not yet
// heard of the latest failover cannot give. Each Sentinel's answer is
// bounded by ctx and the dial timeout. It fails with an error wrapping
// ErrNoAnswer, naming every Sentinel's reason, when none named the master.
func (g *Group) Ask(ctx context.Context) (string, error) {
	type answer struct {
		addr  string
		epoch int64
		err   error
	}
	answers := make([]answer, len(g.pubs))
	var wg sync.WaitGroup
	for i, p := range g.pubs {
		wg.Go(func() {
			actx, cancel := context.WithTimeout(ctx, g.dial.Timeout)
			defer cancel()
			v, err := p.Do(actx, "SENTINEL", "MASTER", g.master)
			if err == nil {
				answers[i].addr, answers[i].epoch, err = parseMaster(v)
			}
			answers[i].err = err
		})
	}
	wg.Wait()
	best := -1
	var why []string
	for i, a := range answers {
		if a.err != nil {
			why = append(why, g.addrs[i]+": "+a.err.Error())
			continue
		}
		if best < 0 || a.epoch > answers[best].epoch {
			best = i
		}
	}
	if best < 0 {
		return "", fmt.Errorf("%w %q (%s)", ErrNoAnswer, g.master, strings.Join(why, "; "))
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if a := answers[best]; a.epoch >= g.epoch || g.known == "" {
		g.known, g.epoch = a.addr, a.epoch
	}
	return g.known, nil
}

// Resolve is Ask that, when no Sentinel answers, returns the master they
// named last, if any: a connection to it checks its role (see
// subconn.Dialer.Master), so the broker keeps working through an outage
// of the Sentinels alone.
func (g *Group) Resolve(ctx context.Context) (string, error) {
	addr, err := g.Ask(ctx)
	if err == nil {
		return addr, nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.known != "" {
		return g.known, nil
	}
	return "", err
}

// Close closes the connections to the Sentinels.
func (g *Group) Close() {
	for _, p := range g.pubs {
		p.Close()
	}
}

// parseMaster reads the master's address and config epoch from a reply to
// SENTINEL MASTER: a flat list of field names and values.
func parseMaster(v any) (addr string, epoch int64, err error) {
	arr, ok := v.([]any)
	if !ok {
		return "", 0, fmt.Errorf("sentinel: SENTINEL MASTER answered %v", v)
	}
	fields := fieldMap(arr)
	if fields["ip"] == "" || fields["port"] == "" {
		return "", 0, fmt.Errorf("sentinel: SENTINEL MASTER gave no address: %v", v)
	}
	epoch, _ = strconv.ParseInt(fields["config-epoch"], 10, 64)
	return net.JoinHostPort(fields["ip"], fields["port"]), epoch, nil
}

// Replicas returns, sorted, the replicas of the master that the first
// Sentinel to answer counts healthy: not down or disconnected in its view,
// their link up, replicating the master Ask named last (a replica not yet
// moved to a new master receives nothing of it).
func (g *Group) Replicas(ctx context.Context) ([]string, error) {
	g.mu.Lock()
	master := g.known
	g.mu.Unlock()
	var why []string
	for i, p := range g.pubs {
		actx, cancel := context.WithTimeout(ctx, g.dial.Timeout)
		v, err := p.Do(actx, "SENTINEL", "REPLICAS", g.master)
		cancel()
		if err != nil {
			why = append(why, g.addrs[i]+": "+err.Error())
			continue
		}
		return healthyReplicas(v, master), nil
	}
	return nil, fmt.Errorf("%w %q (%s)", ErrNoAnswer, g.master, strings.Join(why, "; "))
}

// healthyReplicas reads a reply to SENTINEL REPLICAS: a list of flat field
// lists, one per replica.
func healthyReplicas(v any, master string) []string {
	list, _ := v.([]any)
	var out []string
	for _, e := range list {
		arr, _ := e.([]any)
		f := fieldMap(arr)
		flags := strings.Split(f["flags"], ",")
		if f["ip"] == "" || slices.ContainsFunc(flags, func(s string) bool {
			return s == "s_down" || s == "o_down" || s == "disconnected"
		}) || f["master-link-status"] != "ok" {
			continue
		}
		if master != "" && net.JoinHostPort(f["master-host"], f["master-port"]) != master {
			continue
		}
		out = append(out, net.JoinHostPort(f["ip"], f["port"]))
	}
	slices.Sort(out)
	return out
}

// fieldMap reads a flat list of field names and values, as Sentinel
// describes an instance.
func fieldMap(arr []any) map[string]string {
	f := make(map[string]string, len(arr)/2)
	for i := 0; i+1 < len(arr); i += 2 {
		k, _ := arr[i].(string)
		v, _ := arr[i+1].(string)
		f[k] = v
	}
	return f
}
