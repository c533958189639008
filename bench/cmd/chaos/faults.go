package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/redistest"
)

// fault injects one failure and returns once Redis has settled again.
type fault func(ctx context.Context) error

// clusterFaults are the faults the cluster engine is put through, by name.
// Every fault that fails a master over waits for the cluster to converge
// before it returns; the caller spaces steps further apart.
// frozenSpan is a time during which a master was SIGSTOPped, with the
// partitions it owned: Redis cannot have accepted a publish of those
// partitions that started and ended inside it.
type frozenSpan struct {
	addr     string
	parts    []int
	from, to time.Time
}

func clusterFaults(c *redistest.Cluster, l *shardcast.Layout, rng *rand.Rand, gap time.Duration, frozen func(frozenSpan)) map[string]fault {
	failover := func(force bool) fault {
		return func(ctx context.Context) error {
			rs, err := c.Replicas(ctx)
			if err != nil || len(rs) == 0 {
				return fmt.Errorf("no replica to fail over to: %v", err)
			}
			r := rs[rng.IntN(len(rs))]
			logf("  %s on replica %s", strings.Join(args(force), " "), r.Addr())
			if _, err := r.Do(ctx, args(force)...); err != nil {
				return err
			}
			if err := waitUntil(ctx, 20*time.Second, func() bool { return role(ctx, r) == "master" }); err != nil {
				return fmt.Errorf("%s not promoted: %w", r.Addr(), err)
			}
			return c.WaitConverged(ctx)
		}
	}
	replica := func(ctx context.Context) (*redistest.Server, error) {
		rs, err := c.Replicas(ctx)
		if err != nil || len(rs) == 0 {
			return nil, fmt.Errorf("no replica: %v", err)
		}
		return rs[rng.IntN(len(rs))], nil
	}
	return map[string]fault{
		// Every node drops its Pub/Sub clients (the subscribing broker's
		// connections; the publisher's are normal clients).
		"clientkill": func(ctx context.Context) error {
			for _, m := range c.Nodes() {
				if _, err := m.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub"); err != nil {
					return err
				}
			}
			return nil
		},
		// SIGKILL a master; its replica takes over; restart it (it comes
		// back as a replica of its successor).
		"kill": func(ctx context.Context) error {
			m, err := ownerOfSomeSlot(ctx, c, rng, l)
			if err != nil {
				return err
			}
			logf("  SIGKILL master %s", m.Addr())
			if err := m.Kill(); err != nil {
				return err
			}
			p, err := c.WaitFailover(ctx, m)
			if err != nil {
				return err
			}
			logf("  %s took over; restarting %s", p.Addr(), m.Addr())
			return c.RestartNode(ctx, m)
		},
		// SIGSTOP a master until its replica took over (longer than the
		// node timeout), then SIGCONT: it finds itself demoted.
		"pause": func(ctx context.Context) error {
			m, parts, err := ownerOfSomeSlotParts(ctx, c, rng, l)
			if err != nil {
				return err
			}
			reps, err := c.ReplicasOf(ctx, m)
			if err != nil {
				return err
			}
			logf("  SIGSTOP master %s", m.Addr())
			if err := m.Pause(); err != nil {
				return err
			}
			span := frozenSpan{addr: m.Addr(), parts: parts, from: time.Now()}
			// The span ends when a replica is promoted: from then on a
			// publisher may rightly be acknowledged by the new master.
			promoted := make(chan time.Time, 1)
			watchCtx, stopWatch := context.WithCancel(ctx)
			go func() {
				for watchCtx.Err() == nil {
					for _, r := range reps {
						if role(watchCtx, r) == "master" {
							promoted <- time.Now()
							return
						}
					}
					time.Sleep(10 * time.Millisecond)
				}
				promoted <- time.Now()
			}()
			p, err := c.WaitFailover(ctx, m)
			if err == nil {
				logf("  %s took over; SIGCONT %s", p.Addr(), m.Addr())
			}
			stopWatch()
			span.to = <-promoted
			if rerr := m.Resume(); err == nil {
				err = rerr
			}
			frozen(span)
			if err != nil {
				return err
			}
			return c.WaitConverged(ctx)
		},
		// Move one partition's slot to another master, as an operator's
		// resharding does (SETSLOT MIGRATING/IMPORTING, MIGRATE, SETSLOT NODE).
		"moveslot": func(ctx context.Context) error {
			slot, to, err := slotAndTarget(ctx, c, rng, l)
			if err != nil {
				return err
			}
			return c.MoveSlot(ctx, slot, to)
		},
		// Move one partition's slot with the server's atomic slot migration
		// (Valkey 9's CLUSTER MIGRATESLOTS); only on servers that have it
		// (atomicFault).
		"atomicmove": func(ctx context.Context) error {
			slot, to, err := slotAndTarget(ctx, c, rng, l)
			if err != nil {
				return err
			}
			return c.MigrateSlotsAtomic(ctx, slot, slot, to)
		},
		// SIGKILL a replica and restart it a second later: a broker
		// subscribed on it moves to another node of its shard.
		"killreplica": func(ctx context.Context) error {
			r, err := replica(ctx)
			if err != nil {
				return err
			}
			logf("  SIGKILL replica %s", r.Addr())
			if err := r.Kill(); err != nil {
				return err
			}
			if err := sleepCtx(ctx, time.Second); err != nil {
				return err
			}
			if err := c.RestartNode(ctx, r); err != nil {
				return err
			}
			return c.WaitConverged(ctx)
		},
		// SIGSTOP a replica for 2 s (past the node timeout), then SIGCONT.
		"pausereplica": func(ctx context.Context) error {
			r, err := replica(ctx)
			if err != nil {
				return err
			}
			logf("  SIGSTOP replica %s for 2s", r.Addr())
			if err := r.Pause(); err != nil {
				return err
			}
			err = sleepCtx(ctx, 2*time.Second)
			if rerr := r.Resume(); err == nil {
				err = rerr
			}
			if err != nil {
				return err
			}
			return c.WaitConverged(ctx)
		},
		"failover":      failover(false),
		"failoverforce": failover(true),
		// SIGKILL every node, masters and replicas, then start them all
		// again from their nodes.conf: the whole cluster is down at once
		// and comes back with the roles it last agreed on.
		"restartall": func(ctx context.Context) error {
			nodes := c.Nodes()
			logf("  SIGKILL all %d nodes, then restart them", len(nodes))
			for _, n := range nodes {
				if err := n.Kill(); err != nil {
					return err
				}
			}
			for _, n := range nodes {
				if err := n.Restart(ctx); err != nil {
					return err
				}
			}
			return c.WaitConverged(ctx)
		},
		// Add a master, move three partitions' slots to it, let traffic
		// flow, move them back and remove the node.
		"addremove": func(ctx context.Context) error {
			n, err := c.AddMaster(ctx)
			if err != nil {
				return err
			}
			type moved struct {
				slot uint16
				from *redistest.Server
			}
			var back []moved
			for _, p := range rng.Perm(l.Partitions())[:3] {
				slot := l.Slot(p)
				from, err := c.MasterOfSlot(ctx, slot)
				if err != nil {
					return err
				}
				logf("  slot %d (partition %d) %s -> new master %s", slot, p, from.Addr(), n.Addr())
				if err := c.MoveSlot(ctx, slot, n); err != nil {
					return err
				}
				back = append(back, moved{slot, from})
			}
			if err := sleepCtx(ctx, gap); err != nil {
				return err
			}
			logf("  moving them back and removing %s", n.Addr())
			for _, m := range back {
				if err := c.MoveSlot(ctx, m.slot, m.from); err != nil {
					return err
				}
			}
			return c.RemoveNode(ctx, n)
		},
	}
}

// slotAndTarget picks a partition's slot and a master other than its
// owner, at random, and logs the move.
func slotAndTarget(ctx context.Context, c *redistest.Cluster, rng *rand.Rand, l *shardcast.Layout) (uint16, *redistest.Server, error) {
	part := rng.IntN(l.Partitions())
	slot := l.Slot(part)
	from, err := c.MasterOfSlot(ctx, slot)
	if err != nil {
		return 0, nil, err
	}
	ms, err := c.Masters(ctx)
	if err != nil {
		return 0, nil, err
	}
	var others []*redistest.Server
	for _, m := range ms {
		if m != from {
			others = append(others, m)
		}
	}
	if len(others) == 0 {
		return 0, nil, errors.New("no other master")
	}
	to := others[rng.IntN(len(others))]
	logf("  slot %d (partition %d) %s -> %s", slot, part, from.Addr(), to.Addr())
	return slot, to, nil
}

// atomicFault is the fault that needs CLUSTER MIGRATESLOTS: left out of the
// default list on servers without it, refused when asked for there.
const atomicFault = "atomicmove"

func args(force bool) []string {
	if force {
		return []string{"CLUSTER", "FAILOVER", "FORCE"}
	}
	return []string{"CLUSTER", "FAILOVER"}
}

// ownerOfSomeSlot picks a master that owns slots, at random.
func ownerOfSomeSlot(ctx context.Context, c *redistest.Cluster, rng *rand.Rand, l *shardcast.Layout) (*redistest.Server, error) {
	m, _, err := ownerOfSomeSlotParts(ctx, c, rng, l)
	return m, err
}

// ownerOfSomeSlotParts picks a master that owns partitions, at random, and
// returns them.
func ownerOfSomeSlotParts(ctx context.Context, c *redistest.Cluster, rng *rand.Rand, l *shardcast.Layout) (*redistest.Server, []int, error) {
	parts := make(map[*redistest.Server][]int)
	var owners []*redistest.Server
	for p := range l.Partitions() {
		m, err := c.MasterOfSlot(ctx, l.Slot(p))
		if err != nil {
			return nil, nil, err
		}
		if parts[m] == nil {
			owners = append(owners, m)
		}
		parts[m] = append(parts[m], p)
	}
	m := owners[rng.IntN(len(owners))]
	return m, parts[m], nil
}

// shardedFaults are the faults the sharded engine is put through.
func shardedFaults(servers []*redistest.Server, rng *rand.Rand, down, pause time.Duration) map[string]fault {
	pick := func() *redistest.Server { return servers[rng.IntN(len(servers))] }
	return map[string]fault{
		"clientkill": func(ctx context.Context) error {
			for _, s := range servers {
				if _, err := s.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub"); err != nil {
					return err
				}
			}
			return nil
		},
		// SIGKILL an instance, leave it down for a moment, restart it.
		"kill": func(ctx context.Context) error {
			s := pick()
			logf("  SIGKILL %s", s.Addr())
			if err := s.Kill(); err != nil {
				return err
			}
			// Restarted even when the soak's time ran out meanwhile: a
			// fault that left its instance dead made every channel of it,
			// and with the control instance a re-layout under way, fail the
			// end check for what the harness did, not the broker.
			err := sleepCtx(ctx, down)
			rctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if rerr := s.Restart(rctx); err == nil {
				err = rerr
			}
			return err
		},
		// SIGSTOP an instance for longer than the health timeout, SIGCONT.
		"pause": func(ctx context.Context) error {
			s := pick()
			logf("  SIGSTOP %s", s.Addr())
			if err := s.Pause(); err != nil {
				return err
			}
			err := sleepCtx(ctx, pause)
			if rerr := s.Resume(); err == nil {
				err = rerr
			}
			return err
		},
	}
}

// role returns the first element of ROLE ("master", "slave"), or "" if
// the node does not answer.
func role(ctx context.Context, s *redistest.Server) string {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	v, err := s.Do(ctx, "ROLE")
	if err != nil {
		return ""
	}
	if a, ok := v.([]any); ok && len(a) > 0 {
		r, _ := a[0].(string)
		return r
	}
	return ""
}

func waitUntil(ctx context.Context, timeout time.Duration, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return errors.New("timed out")
		}
		if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
	return nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
