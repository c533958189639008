package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
)

// ErrNoSentinel is returned when no Sentinel is running and unpaused to
// answer, or the group name is not one the Sentinels monitor.
var ErrNoSentinel = errors.New("redistest: no responsive sentinel knows that master")

// MasterAddr asks the first responsive Sentinel (in start order) for the
// named master's address with SENTINEL GET-MASTER-ADDR-BY-NAME, as a
// client would, and returns "ip:port".
func (s *Sentinels) MasterAddr(ctx context.Context, name string) (string, error) {
	var errs []error
	for _, srv := range s.nodes {
		if !srv.responsive() {
			continue
		}
		addr, err := masterAddrFrom(ctx, srv, name)
		if err == nil {
			return addr, nil
		}
		errs = append(errs, err)
	}
	return "", fmt.Errorf("%w (%s): %w", ErrNoSentinel, name, errors.Join(errs...))
}

// Master returns the group's node that MasterAddr names.
func (s *Sentinels) Master(ctx context.Context, name string) (*Server, error) {
	g, ok := s.Group(name)
	if !ok {
		return nil, fmt.Errorf("%w (%s)", ErrNoSentinel, name)
	}
	addr, err := s.MasterAddr(ctx, name)
	if err != nil {
		return nil, err
	}
	if node := g.Servers.Node(addr); node != nil {
		return node, nil
	}
	return nil, fmt.Errorf("redistest: sentinels name %s for %s, not a node of the group", addr, name)
}

// masterAddrFrom asks one Sentinel, bounded by probeTimeout.
func masterAddrFrom(ctx context.Context, srv *Server, name string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	reply, err := srv.Do(ctx, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", name)
	if err != nil {
		return "", fmt.Errorf("sentinel %s: %w", srv.Addr(), err)
	}
	pair, ok := reply.([]any)
	if !ok || len(pair) != 2 {
		return "", fmt.Errorf("%w: sentinel %s GET-MASTER-ADDR-BY-NAME %s answered %v", ErrProtocol, srv.Addr(), name, reply)
	}
	ip, ok1 := pair[0].(string)
	port, ok2 := pair[1].(string)
	if !ok1 || !ok2 {
		return "", fmt.Errorf("%w: sentinel %s GET-MASTER-ADDR-BY-NAME %s answered %v", ErrProtocol, srv.Addr(), name, reply)
	}
	return net.JoinHostPort(ip, port), nil
}

// WaitReady waits until every responsive Sentinel agrees on each group's
// master and sees it up (flags exactly "master"), lists every other
// responsive node of the group as a replica that is up and linked to that
// master, and knows every other responsive Sentinel. StartSentinels calls
// it; call it again after a fault to wait for a quiet, consistent state.
// Sentinel refreshes a replica's INFO every 10 s outside a failover, so
// after a failover this can take that long.
func (s *Sentinels) WaitReady(ctx context.Context) error {
	return poll(ctx, s.checkReady)
}

// checkReady is one round of WaitReady.
func (s *Sentinels) checkReady(ctx context.Context) error {
	var live []*Server
	for _, srv := range s.nodes {
		if srv.responsive() {
			live = append(live, srv)
		}
	}
	if len(live) == 0 {
		return ErrNoSentinel
	}
	for _, g := range s.groups {
		master := ""
		for _, srv := range live {
			addr, err := s.checkSentinelView(ctx, srv, g, live)
			if err != nil {
				return err
			}
			if master != "" && addr != master {
				return fmt.Errorf("%s: sentinels disagree on the master: %s and %s", g.Name, master, addr)
			}
			master = addr
		}
	}
	return nil
}

// checkSentinelView checks what one Sentinel knows of group g and returns
// the master it names.
func (s *Sentinels) checkSentinelView(ctx context.Context, srv *Server, g SentinelGroup, live []*Server) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	replies, err := srv.doMulti(ctx,
		[]string{"SENTINEL", "MASTER", g.Name},
		[]string{"SENTINEL", "REPLICAS", g.Name},
		[]string{"SENTINEL", "SENTINELS", g.Name})
	if err != nil {
		return "", fmt.Errorf("sentinel %s: %w", srv.Addr(), err)
	}
	for _, r := range replies {
		if err, ok := r.(error); ok {
			return "", fmt.Errorf("sentinel %s about %s: %w", srv.Addr(), g.Name, err)
		}
	}
	m := fieldMap(replies[0])
	master := net.JoinHostPort(m["ip"], m["port"])
	if m["flags"] != "master" {
		return "", fmt.Errorf("sentinel %s: master %s (%s) has flags %q", srv.Addr(), g.Name, master, m["flags"])
	}
	node := g.Servers.Node(master)
	if node == nil {
		return "", fmt.Errorf("sentinel %s names %s for %s, not a node of the group", srv.Addr(), master, g.Name)
	}
	replicas := make(map[string]map[string]string)
	for _, e := range entries(replies[1]) {
		replicas[net.JoinHostPort(e["ip"], e["port"])] = e
	}
	for _, r := range g.Servers.Nodes() {
		if r == node || !r.responsive() {
			continue
		}
		e, ok := replicas[r.Addr()]
		if !ok {
			return "", fmt.Errorf("sentinel %s does not list %s as a replica of %s", srv.Addr(), r.Addr(), g.Name)
		}
		if e["flags"] != "slave" || e["master-link-status"] != "ok" || net.JoinHostPort(e["master-host"], e["master-port"]) != master {
			return "", fmt.Errorf("sentinel %s sees replica %s of %s with flags %q, link %s, following %s:%s",
				srv.Addr(), r.Addr(), g.Name, e["flags"], e["master-link-status"], e["master-host"], e["master-port"])
		}
	}
	peers := make(map[string]string)
	for _, e := range entries(replies[2]) {
		peers[net.JoinHostPort(e["ip"], e["port"])] = e["flags"]
	}
	for _, p := range live {
		if p == srv {
			continue
		}
		flags, ok := peers[p.Addr()]
		if !ok {
			return "", fmt.Errorf("sentinel %s does not know sentinel %s for %s yet", srv.Addr(), p.Addr(), g.Name)
		}
		if flags != "sentinel" {
			return "", fmt.Errorf("sentinel %s sees sentinel %s with flags %q", srv.Addr(), p.Addr(), flags)
		}
	}
	return master, nil
}

// fieldMap reads a RESP2 flat key/value array (SENTINEL MASTER's reply).
func fieldMap(reply any) map[string]string {
	arr, _ := reply.([]any)
	m := make(map[string]string, len(arr)/2)
	for i := 0; i+1 < len(arr); i += 2 {
		k, _ := arr[i].(string)
		v, _ := arr[i+1].(string)
		m[k] = v
	}
	return m
}

// entries reads an array of flat key/value arrays (SENTINEL REPLICAS,
// SENTINEL SENTINELS).
func entries(reply any) []map[string]string {
	arr, _ := reply.([]any)
	out := make([]map[string]string, 0, len(arr))
	for _, e := range arr {
		out = append(out, fieldMap(e))
	}
	return out
}

// Masters returns what each Sentinel, in start order, answers to
// GET-MASTER-ADDR-BY-NAME name: "ip:port", or "" for a Sentinel that is
// down, paused or did not answer.
func (s *Sentinels) Masters(ctx context.Context, name string) []string {
	out := make([]string, len(s.nodes))
	for i, srv := range s.nodes {
		if srv.responsive() {
			out[i], _ = masterAddrFrom(ctx, srv, name)
		}
	}
	return out
}

// describeMasters formats Masters for an error message.
func describeMasters(addrs []string) string {
	parts := make([]string, len(addrs))
	for i, a := range addrs {
		if a == "" {
			a = "-"
		}
		parts[i] = a
	}
	return strings.Join(parts, " ")
}
