package redistest

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// setSlotBatch is how many slots one pipelined SETSLOT round covers.
const setSlotBatch = 1024

// migrateBatch is how many keys one MIGRATE moves.
const migrateBatch = 100

// migrateTimeoutMs is MIGRATE's own I/O timeout.
const migrateTimeoutMs = "5000"

// WaitFailover waits until the slots of old — a master that was killed or
// paused — are served by another node (normally its promoted replica), and
// returns that node. It also waits for the whole cluster to converge as in
// WaitConverged: every running, unpaused node reports cluster_state:ok and
// the same slot map, which no longer lists old. It returns ErrNotMaster if
// old owned no slots as far as the cluster remembers.
func (c *Cluster) WaitFailover(ctx context.Context, old *Server) (*Server, error) {
	if !c.isMember(old) {
		return nil, ErrNotMember
	}
	id := old.ID()
	former := c.formerSlots(ctx, id)
	if len(former) == 0 {
		return nil, fmt.Errorf("%w: %s owns no slots", ErrNotMaster, old.Addr())
	}
	var promoted *Server
	err := c.waitConverged(ctx, func(agreed []slotOwner) error {
		owner := ownerOf(agreed, former[0].First)
		if owner == id {
			return fmt.Errorf("%s still owns slot %d", old.Addr(), former[0].First)
		}
		if promoted = c.member(owner); promoted == nil {
			return fmt.Errorf("slot %d owned by unknown node %q", former[0].First, owner)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("redistest: failover of %s: %w", old.Addr(), err)
	}
	return promoted, nil
}

// formerSlots returns the slots id owns according to a responsive node
// now, or, once the failover is over, according to the last agreed slot map
// that listed it.
func (c *Cluster) formerSlots(ctx context.Context, id string) []SlotRange {
	for _, s := range c.responsiveNodes() {
		owners, err := s.clusterSlots(ctx)
		if err != nil {
			continue
		}
		var r []SlotRange
		for _, o := range owners {
			if o.master == id {
				r = append(r, o.slots)
			}
		}
		if len(r) > 0 {
			return r
		}
		break
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.owned[id])
}

// MoveSlot moves one slot to master to; see MoveSlots.
func (c *Cluster) MoveSlot(ctx context.Context, slot uint16, to *Server) error {
	return c.MoveSlots(ctx, slot, slot, to)
}

// MoveSlots moves slots first..last (inclusive) to master to, the way an
// operator's resharding does: it waits for a settled cluster, marks each
// slot IMPORTING on to and MIGRATING on its owner, MIGRATEs any keys, then
// assigns the slot with CLUSTER SETSLOT … NODE on to, on the old owner and
// on every other master, and waits until every node agrees that to owns
// them all (and the cluster has converged as in WaitConverged). Slots that
// to already owns are left alone. Sharded subscribers of a moved slot on the
// old owner receive the server's sunsubscribe push.
func (c *Cluster) MoveSlots(ctx context.Context, first, last uint16, to *Server) error {
	if first > last || last >= SlotCount {
		return fmt.Errorf("redistest: bad slot range %d-%d", first, last)
	}
	if !c.isMember(to) {
		return ErrNotMember
	}
	var agreed []slotOwner
	if err := c.waitConverged(ctx, func(a []slotOwner) error { agreed = a; return nil }); err != nil {
		return fmt.Errorf("redistest: move slots %d-%d: cluster not settled: %w", first, last, err)
	}
	entries, err := to.clusterNodes(ctx)
	if err != nil {
		return err
	}
	toID := to.ID()
	var masters []*Server // every responsive master, to included
	for _, e := range entries {
		if !e.isMaster() {
			if e.id == toID {
				return fmt.Errorf("%w: %s", ErrNotMaster, to.Addr())
			}
			continue
		}
		if s := c.member(e.id); s != nil && s.responsive() {
			masters = append(masters, s)
		}
	}
	for start := int(first); start <= int(last); start += setSlotBatch {
		end := min(start+setSlotBatch-1, int(last))
		if err := c.moveBatch(ctx, agreed, uint16(start), uint16(end), to, masters); err != nil {
			return fmt.Errorf("redistest: move slots %d-%d to %s: %w", first, last, to.Addr(), err)
		}
	}
	err = c.waitConverged(ctx, func(a []slotOwner) error {
		for slot := int(first); slot <= int(last); slot++ {
			if owner := ownerOf(a, uint16(slot)); owner != toID {
				return fmt.Errorf("slot %d still owned by %q", slot, owner)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("redistest: move slots %d-%d to %s: %w", first, last, to.Addr(), err)
	}
	return nil
}

// moveBatch runs the SETSLOT sequence for slots first..last, pipelining
// each step per node.
func (c *Cluster) moveBatch(ctx context.Context, agreed []slotOwner, first, last uint16, to *Server, masters []*Server) error {
	toID := to.ID()
	bySource := make(map[string][]string) // source ID → slots (as text)
	var sources []string
	var importing [][]string
	for slot := int(first); slot <= int(last); slot++ {
		owner := ownerOf(agreed, uint16(slot))
		if owner == toID {
			continue
		}
		if owner == "" {
			return fmt.Errorf("slot %d has no owner", slot)
		}
		s := strconv.Itoa(slot)
		if _, seen := bySource[owner]; !seen {
			sources = append(sources, owner)
		}
		bySource[owner] = append(bySource[owner], s)
		importing = append(importing, []string{"CLUSTER", "SETSLOT", s, "IMPORTING", owner})
	}
	if len(importing) == 0 {
		return nil
	}
	if err := to.doAll(ctx, importing...); err != nil {
		return err
	}
	for _, srcID := range sources {
		src := c.member(srcID)
		if src == nil || !src.responsive() {
			return fmt.Errorf("slot owner %s is not a running member", srcID)
		}
		var migrating [][]string
		for _, s := range bySource[srcID] {
			migrating = append(migrating, []string{"CLUSTER", "SETSLOT", s, "MIGRATING", toID})
		}
		if err := src.doAll(ctx, migrating...); err != nil {
			return err
		}
		for _, s := range bySource[srcID] {
			if err := migrateKeys(ctx, src, to, s); err != nil {
				return err
			}
		}
	}
	// The new owner first: it bumps its config epoch, so its claim wins
	// over any stale gossip. Then the old owners, then everyone else.
	var assign [][]string
	for slot := int(first); slot <= int(last); slot++ {
		assign = append(assign, []string{"CLUSTER", "SETSLOT", strconv.Itoa(slot), "NODE", toID})
	}
	order := []*Server{to}
	for _, srcID := range sources {
		order = append(order, c.member(srcID))
	}
	for _, m := range masters {
		if !slices.Contains(order, m) {
			order = append(order, m)
		}
	}
	for _, m := range order {
		if err := m.doAll(ctx, assign...); err != nil {
			return err
		}
	}
	return nil
}

// migrateKeys moves every key of slot from src to dst.
func migrateKeys(ctx context.Context, src, dst *Server, slot string) error {
	for {
		reply, err := src.Do(ctx, "CLUSTER", "GETKEYSINSLOT", slot, strconv.Itoa(migrateBatch))
		if err != nil {
			return fmt.Errorf("%s CLUSTER GETKEYSINSLOT %s: %w", src.Addr(), slot, err)
		}
		keys, ok := reply.([]any)
		if !ok {
			return fmt.Errorf("%w: GETKEYSINSLOT answered %T", ErrProtocol, reply)
		}
		if len(keys) == 0 {
			return nil
		}
		cmd := []string{"MIGRATE", "127.0.0.1", strconv.Itoa(dst.Port()), "", "0", migrateTimeoutMs, "REPLACE", "KEYS"}
		for _, k := range keys {
			key, ok := k.(string)
			if !ok {
				return fmt.Errorf("%w: GETKEYSINSLOT key %v", ErrProtocol, k)
			}
			cmd = append(cmd, key)
		}
		if err := src.doAll(ctx, cmd); err != nil {
			return err
		}
	}
}

// AddMaster starts a new, empty cluster node, has every responsive member
// CLUSTER MEET it, and returns it once the cluster has converged with it
// as a member (as in WaitConverged). It owns no slots: give it some with
// MoveSlots. A new master only reports cluster_state:ok 2 s after it
// started (Redis's rejoin delay), so this takes at least that long.
func (c *Cluster) AddMaster(ctx context.Context) (*Server, error) {
	existing := c.responsiveNodes()
	if len(existing) == 0 {
		return nil, ErrNoLiveNode
	}
	dir, err := c.env.tempDir()
	if err != nil {
		return nil, fmt.Errorf("redistest: add master: %w", err)
	}
	s, err := c.startNode(ctx, dir)
	if err != nil {
		return nil, fmt.Errorf("redistest: add master: %w", err)
	}
	c.mu.Lock()
	c.nodes = append(c.nodes, s)
	c.mu.Unlock()
	c.env.logf("redistest: added cluster node %s (pid %d, id %s)", s.Addr(), s.PID(), s.ID())
	meet := []string{"CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(s.Port())}
	for _, e := range existing {
		if err := e.doAll(ctx, meet); err != nil {
			return nil, fmt.Errorf("redistest: add master: %w", err)
		}
	}
	if err := c.WaitConverged(ctx); err != nil {
		return nil, fmt.Errorf("redistest: add master %s: %w", s.Addr(), err)
	}
	return s, nil
}

// RemoveNode takes s out of the cluster for good: s must own no slots and
// have no replicas (move its slots away first). It kills s, has every other
// responsive node CLUSTER FORGET it, and waits for convergence. Paused
// nodes are not told. s can be a master or a replica.
func (c *Cluster) RemoveNode(ctx context.Context, s *Server) error {
	if !c.isMember(s) {
		return ErrNotMember
	}
	id := s.ID()
	var viewer *Server
	for _, n := range c.responsiveNodes() {
		if n != s {
			viewer = n
			break
		}
	}
	if viewer == nil {
		return ErrNoLiveNode
	}
	entries, err := viewer.clusterNodes(ctx)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if (e.id == id && len(e.slots) > 0) || (e.masterID == id && !e.has("fail")) {
			return fmt.Errorf("%w: %s", ErrNodeInUse, s.Addr())
		}
	}
	s.close()
	c.mu.Lock()
	c.nodes = slices.DeleteFunc(c.nodes, func(n *Server) bool { return n == s })
	c.mu.Unlock()
	for _, n := range c.responsiveNodes() {
		_, err := n.Do(ctx, "CLUSTER", "FORGET", id)
		if err != nil && !strings.Contains(err.Error(), "Unknown node") {
			return fmt.Errorf("redistest: %s CLUSTER FORGET %s: %w", n.Addr(), id, err)
		}
	}
	if err := c.WaitConverged(ctx); err != nil {
		return fmt.Errorf("redistest: remove node %s: %w", s.Addr(), err)
	}
	return nil
}

// RestartNode restarts a member (see Server.Restart) and waits until the
// cluster has converged with it back in (see WaitConverged). A former
// master that was failed over comes back as a replica of its successor.
func (c *Cluster) RestartNode(ctx context.Context, s *Server) error {
	if !c.isMember(s) {
		return ErrNotMember
	}
	if err := s.Restart(ctx); err != nil {
		return err
	}
	if err := c.WaitConverged(ctx); err != nil {
		return fmt.Errorf("redistest: after restarting %s: %w", s.Addr(), err)
	}
	return nil
}
