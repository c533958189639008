package redistest

import (
	"context"
	"fmt"
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
// ("ip:port"): every responsive Sentinel names the same new master, that
// node of the group says role:master and lists the group's other
// responsive nodes as online replicas, each of them following it with its
// link up. The old master is not waited for: a killed one is down, and a
// live one (after Failover) stays a master until Sentinel converts it,
// which takes several seconds more (Replicated.WaitLinked waits for that).
// It returns the new master's address.
func (s *Sentinels) WaitSwitch(ctx context.Context, name, old string) (string, error) {
	g, ok := s.Group(name)
	if !ok {
		return "", fmt.Errorf("%w (%s)", ErrNoSentinel, name)
	}
	var addr string
	err := poll(ctx, func(ctx context.Context) error {
		views := s.Masters(ctx, name)
		addr = ""
		for _, v := range views {
			switch {
			case v == "":
				continue
			case v == old:
				return fmt.Errorf("%s: sentinels still name %s (%s)", name, old, describeMasters(views))
			case addr != "" && v != addr:
				return fmt.Errorf("%s: sentinels disagree on the new master (%s)", name, describeMasters(views))
			}
			addr = v
		}
		if addr == "" {
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

// KillMaster SIGKILLs the named group's current master (as the Sentinels
// name it) and waits until the Sentinels have failed over (WaitSwitch). It
// returns the killed server, dead until the test restarts it, and the new
// master's address.
func (s *Sentinels) KillMaster(ctx context.Context, name string) (old *Server, newAddr string, err error) {
	g, ok := s.Group(name)
	if !ok {
		return nil, "", fmt.Errorf("%w (%s)", ErrNoSentinel, name)
	}
	addr, err := s.MasterAddr(ctx, name)
	if err != nil {
		return nil, "", err
	}
	old = g.Servers.Node(addr)
	if old == nil {
		return nil, "", fmt.Errorf("redistest: sentinels name %s for %s, not a node of the group", addr, name)
	}
	if err := old.Kill(); err != nil {
		return old, "", err
	}
	newAddr, err = s.WaitSwitch(ctx, name, addr)
	return old, newAddr, err
}
