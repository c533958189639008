package redistest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// checkLinksUp verifies that every replica's link to its master is up.
func checkLinksUp(ctx context.Context, replicas []*Server) error {
	for _, r := range replicas {
		pctx, cancel := context.WithTimeout(ctx, probeTimeout)
		info, err := r.Info(pctx, "replication")
		cancel()
		if err != nil {
			return err
		}
		if info["master_link_status"] != "up" {
			return fmt.Errorf("%s: master_link_status:%s", r.Addr(), info["master_link_status"])
		}
	}
	return nil
}

// checkMembership verifies that every node in nodes lists every other as a
// healthy, fully joined member.
func (c *Cluster) checkMembership(ctx context.Context, nodes []*Server) error {
	for _, s := range nodes {
		entries, err := s.clusterNodes(ctx)
		if err != nil {
			return err
		}
		if err := requireMembers(s, entries, nodes); err != nil {
			return err
		}
	}
	return nil
}

// requireMembers checks the viewer's CLUSTER NODES for every node in want.
func requireMembers(viewer *Server, entries []nodeEntry, want []*Server) error {
	for _, w := range want {
		i := slices.IndexFunc(entries, func(e nodeEntry) bool { return e.id == w.ID() })
		if i < 0 {
			return fmt.Errorf("%s does not know %s (%s) yet", viewer.Addr(), w.Addr(), w.ID())
		}
		if !entries[i].healthy() {
			return fmt.Errorf("%s sees %s as %s", viewer.Addr(), w.Addr(), strings.Join(entries[i].flags, ","))
		}
	}
	return nil
}

// clusterNodes asks one node for its CLUSTER NODES, bounded by probeTimeout.
func (s *Server) clusterNodes(ctx context.Context) ([]nodeEntry, error) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	reply, err := s.Do(ctx, "CLUSTER", "NODES")
	if err != nil {
		return nil, fmt.Errorf("redistest: %s CLUSTER NODES: %w", s.Addr(), err)
	}
	text, ok := reply.(string)
	if !ok {
		return nil, fmt.Errorf("%w: CLUSTER NODES answered %T", ErrProtocol, reply)
	}
	return parseClusterNodes(text)
}

// poll runs check until it succeeds or ctx ends; the error then carries
// check's last complaint, which is what a failing test needs to show.
func poll(ctx context.Context, check func(context.Context) error) error {
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	for {
		err := check(ctx)
		if err == nil {
			return nil
		}
		timer.Reset(pollInterval)
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w; last check: %v", ctx.Err(), err)
		case <-timer.C:
		}
	}
}

// nodeView is what one node reports about the cluster in one probe.
type nodeView struct {
	state   string // cluster_state
	slots   []slotOwner
	key     string // slotMapKey(slots)
	entries []nodeEntry
	role    string // INFO replication role: master or slave
	linkUp  bool   // master_link_status:up (replicas)
}

// probe asks one node for CLUSTER INFO, CLUSTER SLOTS, CLUSTER NODES and
// INFO replication in one round trip.
func (s *Server) probe(ctx context.Context) (nodeView, error) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	replies, err := s.doMulti(ctx,
		[]string{"CLUSTER", "INFO"}, []string{"CLUSTER", "SLOTS"},
		[]string{"CLUSTER", "NODES"}, []string{"INFO", "replication"})
	if err != nil {
		return nodeView{}, err
	}
	texts := make([]string, len(replies))
	for i, r := range replies {
		if i == 1 {
			continue
		}
		t, ok := r.(string)
		if !ok {
			return nodeView{}, fmt.Errorf("redistest: %s probe reply %d: %v", s.Addr(), i, r)
		}
		texts[i] = t
	}
	var v nodeView
	v.state = parseInfo(texts[0])["cluster_state"]
	if v.slots, err = parseClusterSlots(replies[1]); err != nil {
		return nodeView{}, err
	}
	v.key = slotMapKey(v.slots)
	if v.entries, err = parseClusterNodes(texts[2]); err != nil {
		return nodeView{}, err
	}
	repl := parseInfo(texts[3])
	v.role = repl["role"]
	v.linkUp = repl["master_link_status"] == "up"
	return v, nil
}

// WaitConverged waits until the cluster is settled as seen from every node
// that is running and not paused: each reports cluster_state:ok, all report
// the same CLUSTER SLOTS, each lists all of them as healthy members, no slot
// is migrating, every slot owner and listed replica is one of them, and
// every replica among them has its master link up.
func (c *Cluster) WaitConverged(ctx context.Context) error {
	return c.waitConverged(ctx, nil)
}

func (c *Cluster) waitConverged(ctx context.Context, extra func([]slotOwner) error) error {
	return poll(ctx, func(ctx context.Context) error {
		agreed, err := c.checkConverged(ctx)
		if err != nil {
			return err
		}
		if extra != nil {
			return extra(agreed)
		}
		return nil
	})
}

// checkConverged runs one convergence probe round and returns the agreed
// slot map. It stops at the first node that disagrees: while the cluster
// is still settling, that keeps a round cheap.
func (c *Cluster) checkConverged(ctx context.Context) ([]slotOwner, error) {
	live := c.responsiveNodes()
	if len(live) == 0 {
		return nil, ErrNoLiveNode
	}
	liveIDs := make(map[string]bool, len(live))
	for _, s := range live {
		liveIDs[s.ID()] = true
	}
	var ref nodeView
	for i, s := range live {
		v, err := s.probe(ctx)
		if err != nil {
			return nil, err
		}
		if v.state != "ok" {
			return nil, fmt.Errorf("%s: cluster_state:%s", s.Addr(), v.state)
		}
		if i == 0 {
			ref = v
			for _, o := range v.slots {
				for _, id := range append([]string{o.master}, o.replicas...) {
					if !liveIDs[id] {
						return nil, fmt.Errorf("%s: slots %d-%d list node %s, which is killed or paused",
							s.Addr(), o.slots.First, o.slots.Last, id)
					}
				}
			}
		} else if v.key != ref.key {
			return nil, fmt.Errorf("slot maps differ: %s has %s; %s has %s", live[0].Addr(), ref.key, s.Addr(), v.key)
		}
		if err := requireMembers(s, v.entries, live); err != nil {
			return nil, err
		}
		for _, e := range v.entries {
			if e.migrating {
				return nil, fmt.Errorf("%s: node %s has a slot migration in progress", s.Addr(), e.addr)
			}
		}
		if v.role == "slave" && !v.linkUp {
			return nil, fmt.Errorf("%s: replica link to its master is not up", s.Addr())
		}
	}
	c.remember(ref.slots, liveIDs)
	return ref.slots, nil
}

// remember records an agreed slot map in c.owned.
func (c *Cluster) remember(agreed []slotOwner, liveIDs map[string]bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.owned == nil {
		c.owned = make(map[string][]SlotRange)
	}
	for id := range liveIDs {
		delete(c.owned, id)
	}
	for _, o := range agreed {
		c.owned[o.master] = append(c.owned[o.master], o.slots)
	}
}

// responsiveNodes returns the members that are running and not paused.
func (c *Cluster) responsiveNodes() []*Server {
	var live []*Server
	for _, s := range c.Nodes() {
		if s.responsive() {
			live = append(live, s)
		}
	}
	return live
}
