package redistest

import (
	"context"
	"fmt"
	"net"
)

// Failover asks the first responsive Sentinel to fail the named master over
// now (SENTINEL FAILOVER), without waiting for agreement that it is down.
// It returns once the Sentinel accepted; WaitSwitch waits for the result.
// A Sentinel refuses while a failover of that master is in progress
// (-INPROG) or when no replica is fit (-NOGOODSLAVE); the error says so.
func (s *Sentinels) Failover(ctx context.Context, name string) error {
	for _, srv := range s.nodes {
		if !srv.responsive() {
			continue
		}
		if err := srv.doAll(ctx, []string{"SENTINEL", "FAILOVER", name}); err != nil {
			return fmt.Errorf("redistest: sentinel failover of %s: %w", name, err)
		}
		return nil
	}
	return fmt.Errorf("%w (%s)", ErrNoSentinel, name)
}

// WaitSwitch waits until the named master has moved away from old
// ("ip:port") and the failover is over: every responsive Sentinel reports
// the same new master in SENTINEL MASTER, with flags exactly "master" (no
// failover in progress, so each has announced +switch-master), that node
// of the group says role:master and lists the group's other responsive
// nodes as online replicas, each following it with its link up. It
// returns the new master's address.
//
// During the failover GET-MASTER-ADDR-BY-NAME already answers the promoted
// replica, about a second before +switch-master. The old master is not
// waited for: a killed one is down, and a live one (after Failover) stays
// a master for about 10 s more until Sentinel converts it
// (Replicated.WaitLinked waits for that).
func (s *Sentinels) WaitSwitch(ctx context.Context, name, old string) (string, error) {
	g, ok := s.Group(name)
	if !ok {
		return "", fmt.Errorf("%w (%s)", ErrNoSentinel, name)
	}
	var addr string
	err := poll(ctx, func(ctx context.Context) error {
		addr = ""
		live := 0
		for _, srv := range s.nodes {
			if !srv.responsive() {
				continue
			}
			live++
			m, flags, err := masterView(ctx, srv, name)
			if err != nil {
				return err
			}
			switch {
			case m == old:
				return fmt.Errorf("%s: sentinel %s still names %s (flags %s)", name, srv.Addr(), old, flags)
			case flags != "master":
				return fmt.Errorf("%s: sentinel %s names %s with flags %s", name, srv.Addr(), m, flags)
			case addr != "" && m != addr:
				return fmt.Errorf("%s: sentinels disagree on the new master: %s and %s", name, addr, m)
			}
			addr = m
		}
		if live == 0 {
			return fmt.Errorf("%w (%s)", ErrNoSentinel, name)
		}
		node := g.Servers.Node(addr)
		if node == nil {
			return fmt.Errorf("%s: sentinels name %s, not a node of the group", name, addr)
		}
		return g.Servers.checkLinked(ctx, node, g.Servers.Node(old))
	})
	if err != nil {
		return "", fmt.Errorf("redistest: waiting for %s to switch from %s: %w", name, old, err)
	}
	return addr, nil
}

// masterView is one Sentinel's SENTINEL MASTER: the master's address and
// its flags.
func masterView(ctx context.Context, srv *Server, name string) (addr, flags string, err error) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	reply, err := srv.Do(ctx, "SENTINEL", "MASTER", name)
	if err != nil {
		return "", "", fmt.Errorf("sentinel %s SENTINEL MASTER %s: %w", srv.Addr(), name, err)
	}
	m := fieldMap(reply)
	return net.JoinHostPort(m["ip"], m["port"]), m["flags"], nil
}

// KillMaster SIGKILLs the named group's current master (as the Sentinels
// name it) and waits until the Sentinels have failed over (WaitSwitch). It
// returns the killed server, dead until the test restarts it, and the new
// master's address.
func (s *Sentinels) KillMaster(ctx context.Context, name string) (old *Server, newAddr string, err error) {
	old, err = s.Master(ctx, name)
	if err != nil {
		return nil, "", err
	}
	addr := old.Addr()
	if err := old.Kill(); err != nil {
		return old, "", err
	}
	newAddr, err = s.WaitSwitch(ctx, name, addr)
	return old, newAddr, err
}
