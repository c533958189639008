package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/shardcast/shardcast/redistest"
)

// sentinelFaults are the faults a sharded engine over Sentinel shards is
// put through: the master killed (and restarted once Sentinel failed it
// over), SENTINEL FAILOVER, a replica frozen, every subscriber dropped.
// Each waits until the shard is whole again (every node following the
// master) before it returns.
func sentinelFaults(s *redistest.Sentinels, groups []redistest.SentinelGroup, rng *rand.Rand, down, pause time.Duration) map[string]fault {
	pick := func() redistest.SentinelGroup { return groups[rng.IntN(len(groups))] }
	whole := func(ctx context.Context, g redistest.SentinelGroup, master string) error {
		n := g.Servers.Node(master)
		if n == nil {
			return fmt.Errorf("%s: no node %s", g.Name, master)
		}
		return g.Servers.WaitLinked(ctx, n)
	}
	return map[string]fault{
		"clientkill": func(ctx context.Context) error {
			for _, g := range groups {
				for _, n := range g.Servers.Nodes() {
					if _, err := n.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub"); err != nil {
						return err
					}
				}
			}
			return nil
		},
		// SIGKILL the master, wait for Sentinel to fail it over, restart
		// it (it comes back a master, until Sentinel demotes it).
		"killmaster": func(ctx context.Context) error {
			g := pick()
			old, newAddr, err := s.KillMaster(ctx, g.Name)
			if old != nil {
				logf("  SIGKILL master %s of %s; new master %s", old.Addr(), g.Name, newAddr)
				_ = sleepCtx(ctx, down)
				rctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				if rerr := old.Restart(rctx); err == nil {
					err = rerr
				}
			}
			if err != nil {
				return err
			}
			return whole(ctx, g, newAddr)
		},
		"failover": func(ctx context.Context) error {
			g := pick()
			old, err := s.MasterAddr(ctx, g.Name)
			if err != nil {
				return err
			}
			if err := s.Failover(ctx, g.Name); err != nil {
				return err
			}
			newAddr, err := s.WaitSwitch(ctx, g.Name, old)
			if err != nil {
				return err
			}
			logf("  SENTINEL FAILOVER %s: %s → %s", g.Name, old, newAddr)
			return whole(ctx, g, newAddr)
		},
		// SIGSTOP a replica for longer than the health timeout, SIGCONT.
		"pausereplica": func(ctx context.Context) error {
			g := pick()
			master, err := s.MasterAddr(ctx, g.Name)
			if err != nil {
				return err
			}
			var replicas []*redistest.Server
			for _, n := range g.Servers.Nodes() {
				if n.Addr() != master {
					replicas = append(replicas, n)
				}
			}
			n := replicas[rng.IntN(len(replicas))]
			logf("  SIGSTOP replica %s of %s", n.Addr(), g.Name)
			if err := n.Pause(); err != nil {
				return err
			}
			err = sleepCtx(ctx, pause)
			if rerr := n.Resume(); err == nil {
				err = rerr
			}
			if err != nil {
				return err
			}
			return whole(ctx, g, master)
		},
	}
}
