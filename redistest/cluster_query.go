package redistest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Nodes returns every member in start order, including nodes that are
// killed or paused but not removed.
func (c *Cluster) Nodes() []*Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.nodes)
}

// Seeds returns the addresses of the members that are running and not
// paused: what a client should be given to connect.
func (c *Cluster) Seeds() []string {
	var seeds []string
	for _, s := range c.responsiveNodes() {
		seeds = append(seeds, s.Addr())
	}
	return seeds
}

// member returns the node with the given ID, or nil.
func (c *Cluster) member(id string) *Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.nodes {
		if s.ID() == id {
			return s
		}
	}
	return nil
}

func (c *Cluster) isMember(s *Server) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Contains(c.nodes, s)
}

// view returns CLUSTER NODES from the first responsive node that answers.
func (c *Cluster) view(ctx context.Context) ([]nodeEntry, error) {
	var errs []error
	for _, s := range c.responsiveNodes() {
		entries, err := s.clusterNodes(ctx)
		if err == nil {
			return entries, nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(append([]error{ErrNoLiveNode}, errs...)...)
}

// Masters returns the nodes currently acting as masters, as one responsive
// node's CLUSTER NODES sees them (not by start order): masters the viewer
// considers failed are left out, masters without slots are included.
// Masters with slots come first, ordered by their lowest slot. Call
// WaitConverged first for an answer every node would give.
func (c *Cluster) Masters(ctx context.Context) ([]*Server, error) {
	entries, err := c.view(ctx)
	if err != nil {
		return nil, err
	}
	var withSlots, empty []nodeEntry
	for _, e := range entries {
		switch {
		case !e.isMaster() || e.has("fail") || c.member(e.id) == nil:
		case len(e.slots) > 0:
			withSlots = append(withSlots, e)
		default:
			empty = append(empty, e)
		}
	}
	slices.SortFunc(withSlots, func(a, b nodeEntry) int {
		return int(slices.MinFunc(a.slots, cmpFirst).First) - int(slices.MinFunc(b.slots, cmpFirst).First)
	})
	return c.servers(append(withSlots, empty...)), nil
}

func cmpFirst(a, b SlotRange) int { return int(a.First) - int(b.First) }

// Replicas returns the nodes currently acting as replicas, as one
// responsive node sees them, leaving out those it considers failed.
func (c *Cluster) Replicas(ctx context.Context) ([]*Server, error) {
	return c.replicasWhere(ctx, func(nodeEntry) bool { return true })
}

// ReplicasOf returns the replicas currently following master, as one
// responsive node sees them, leaving out those it considers failed.
func (c *Cluster) ReplicasOf(ctx context.Context, master *Server) ([]*Server, error) {
	if !c.isMember(master) {
		return nil, ErrNotMember
	}
	id := master.ID()
	return c.replicasWhere(ctx, func(e nodeEntry) bool { return e.masterID == id })
}

func (c *Cluster) replicasWhere(ctx context.Context, keep func(nodeEntry) bool) ([]*Server, error) {
	entries, err := c.view(ctx)
	if err != nil {
		return nil, err
	}
	var picked []nodeEntry
	for _, e := range entries {
		if e.has("slave") && !e.has("fail") && keep(e) {
			picked = append(picked, e)
		}
	}
	return c.servers(picked), nil
}

// servers maps entries to members, in start order within equal keys.
func (c *Cluster) servers(entries []nodeEntry) []*Server {
	out := make([]*Server, 0, len(entries))
	for _, e := range entries {
		if s := c.member(e.id); s != nil {
			out = append(out, s)
		}
	}
	return out
}

// MasterOfSlot returns the master that owns slot according to one
// responsive node's CLUSTER SLOTS.
func (c *Cluster) MasterOfSlot(ctx context.Context, slot uint16) (*Server, error) {
	if slot >= SlotCount {
		return nil, fmt.Errorf("redistest: slot %d out of range", slot)
	}
	var errs []error
	for _, s := range c.responsiveNodes() {
		owners, err := s.clusterSlots(ctx)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		id := ownerOf(owners, slot)
		if id == "" {
			return nil, fmt.Errorf("redistest: %s reports no owner for slot %d", s.Addr(), slot)
		}
		if m := c.member(id); m != nil {
			return m, nil
		}
		return nil, fmt.Errorf("redistest: slot %d is owned by unknown node %s", slot, id)
	}
	return nil, errors.Join(append([]error{ErrNoLiveNode}, errs...)...)
}

// clusterSlots asks one node for CLUSTER SLOTS, bounded by probeTimeout.
func (s *Server) clusterSlots(ctx context.Context) ([]slotOwner, error) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	reply, err := s.Do(ctx, "CLUSTER", "SLOTS")
	if err != nil {
		return nil, fmt.Errorf("redistest: %s CLUSTER SLOTS: %w", s.Addr(), err)
	}
	return parseClusterSlots(reply)
}

// describeShort lists the nodes as addr(pid), for logs.
func (c *Cluster) describeShort() string {
	var b strings.Builder
	for i, s := range c.Nodes() {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%s(pid %d)", s.Addr(), s.PID())
	}
	return b.String()
}

// describe gives every node's state and log tail, for failure messages.
func (c *Cluster) describe() string {
	var b strings.Builder
	for _, s := range c.Nodes() {
		fmt.Fprintf(&b, "=== node %s id %s dir %s: %s\n", s.Addr(), s.ID(), s.Dir(), s.inst.describe())
	}
	return b.String()
}
