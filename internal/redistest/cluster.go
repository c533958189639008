package redistest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

const (
	// maxClusterNodes keeps a typo from starting hundreds of processes on
	// a 2-core machine.
	maxClusterNodes = 64
	// clusterStartTimeout bounds StartCluster. A healthy 3×1 cluster is
	// ready in about 2 s; the margin is for a loaded machine.
	clusterStartTimeout = 60 * time.Second
	// pollInterval is the pause between two convergence probes.
	pollInterval = 20 * time.Millisecond
	// probeTimeout bounds one node's answer inside a probe round, so that
	// a node paused behind the harness's back cannot stall a wait.
	probeTimeout = time.Second
)

// Errors returned by Cluster methods.
var (
	// ErrNotMember is returned for a *Server that is not a node of this
	// cluster (or was removed from it).
	ErrNotMember = errors.New("redistest: server is not a node of this cluster")
	// ErrNoLiveNode is returned when no node is running and unpaused to
	// answer a question about the cluster.
	ErrNoLiveNode = errors.New("redistest: no responsive cluster node")
	// ErrNotMaster is returned when an operation needs a master (with
	// slots, for WaitFailover) and the node is not one.
	ErrNotMaster = errors.New("redistest: node is not a master")
	// ErrNodeInUse is returned by RemoveNode for a node that still owns
	// slots or has replicas.
	ErrNodeInUse = errors.New("redistest: node still owns slots or has replicas")
)

// Cluster is a Redis Cluster of harness-started nodes on loopback, created
// with the slot split of `redis-cli --cluster create`. Its nodes are killed
// and their directories removed when the test ends. Methods are safe for
// concurrent use, but topology changes (kill, pause, moves, add, remove)
// are meant to be driven from one goroutine.
type Cluster struct {
	tb testing.TB
	o  options

	mu    sync.Mutex
	nodes []*Server // members, in start order
	// owned remembers, per node ID, the slots the node owned in the last
	// agreed map that listed it, until it is seen alive without slots:
	// WaitFailover needs a dead master's slots after the failover erased
	// them from every live node's view.
	owned map[string][]SlotRange
}

// StartCluster starts masters×(1+replicas) cluster nodes and builds a
// cluster from them: master i gets the i-th range of redis-cli's even slot
// split, and replica j follows master j mod masters. It returns once every
// node reports cluster_state:ok, all nodes agree on CLUSTER SLOTS (each
// master listing all its replicas) and every replica's link to its master
// is up. It fails the test otherwise. Unlike redis-cli, it accepts 1 or 2
// masters.
func StartCluster(tb testing.TB, masters, replicas int, opts ...Option) *Cluster {
	tb.Helper()
	requireBinaries(tb)
	n := masters * (1 + replicas)
	if masters < 1 || replicas < 0 || n > maxClusterNodes {
		tb.Fatalf("redistest: StartCluster(%d, %d): need masters >= 1, replicas >= 0 and at most %d nodes",
			masters, replicas, maxClusterNodes)
	}
	c := &Cluster{tb: tb, o: buildOptions(opts)}
	// Directories first: their removal must be registered before our
	// cleanup so that it runs after the nodes are dead.
	dirs := make([]string, n)
	for i := range dirs {
		dirs[i] = tb.TempDir()
	}
	tb.Cleanup(c.close)

	ctx, cancel := context.WithTimeout(context.Background(), clusterStartTimeout)
	defer cancel()
	began := time.Now()
	if err := c.startNodes(ctx, dirs); err != nil {
		tb.Fatalf("redistest: start cluster nodes: %v", err)
	}
	if err := c.create(ctx, masters, replicas); err != nil {
		tb.Fatalf("redistest: create %d×%d cluster: %v\n%s", masters, replicas, err, c.describe())
	}
	tb.Logf("redistest: cluster %d×%d ready in %v: %s", masters, replicas,
		time.Since(began).Round(time.Millisecond), c.describeShort())
	return c
}

// startNodes starts one cluster-enabled server per directory, in parallel,
// and records each one that started so that cleanup finds it even when
// another failed.
func (c *Cluster) startNodes(ctx context.Context, dirs []string) error {
	started := make([]*Server, len(dirs))
	errs := make([]error, len(dirs))
	var wg sync.WaitGroup
	for i, dir := range dirs {
		wg.Go(func() { started[i], errs[i] = c.startNode(ctx, dir) })
	}
	wg.Wait()
	c.mu.Lock()
	for _, s := range started {
		if s != nil {
			c.nodes = append(c.nodes, s)
		}
	}
	c.mu.Unlock()
	return errors.Join(errs...)
}

// startNode starts one cluster-enabled server and learns its node ID.
func (c *Cluster) startNode(ctx context.Context, dir string) (*Server, error) {
	s, err := startProcess(ctx, c.tb, dir, true, c.o)
	if err != nil {
		return nil, err
	}
	reply, err := s.Do(ctx, "CLUSTER", "MYID")
	id, ok := reply.(string)
	if err != nil || !ok || id == "" {
		s.close()
		return nil, fmt.Errorf("redistest: %s CLUSTER MYID: %v %v", s.Addr(), reply, err)
	}
	s.mu.Lock()
	s.id = id
	s.mu.Unlock()
	return s, nil
}

// create does what `redis-cli --cluster create` does, minus its fixed
// one-second sleeps: assign slots and distinct config epochs, introduce
// every node, attach the replicas, then wait for convergence.
func (c *Cluster) create(ctx context.Context, masters, replicas int) error {
	nodes := c.Nodes()
	split := redisCLISlotSplit(masters)
	for i, s := range nodes {
		// Distinct epochs up front, as redis-cli sets them, spare the nodes
		// the slow epoch-collision resolution. It must precede MEET.
		cmds := [][]string{{"CLUSTER", "SET-CONFIG-EPOCH", strconv.Itoa(i + 1)}}
		if i < masters {
			r := split[i]
			cmds = append(cmds, []string{"CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(int(r.First)), strconv.Itoa(int(r.Last))})
		}
		if err := s.doAll(ctx, cmds...); err != nil {
			return err
		}
	}
	// Every node meets the first directly: the handshakes run in parallel
	// instead of waiting for gossip to spread.
	for _, s := range nodes[1:] {
		if err := nodes[0].doAll(ctx, []string{"CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(s.Port())}); err != nil {
			return err
		}
	}
	if err := poll(ctx, func(ctx context.Context) error { return c.checkMembership(ctx, nodes) }); err != nil {
		return fmt.Errorf("waiting for all nodes to know each other: %w", err)
	}
	for j := range masters * replicas {
		replica, master := nodes[masters+j], nodes[j%masters]
		if err := replica.doAll(ctx, []string{"CLUSTER", "REPLICATE", master.ID()}); err != nil {
			return err
		}
	}
	if replicas > 0 {
		if err := poll(ctx, func(ctx context.Context) error { return checkLinksUp(ctx, nodes[masters:]) }); err != nil {
			return fmt.Errorf("waiting for replica links: %w", err)
		}
		// A replicated write moves every replica's offset off 0 at once, so
		// CLUSTER SLOTS lists the replicas now rather than after the
		// master's first replication PING. FLUSHALL is replicated even on
		// an empty master, and the cluster holds no data yet.
		for _, m := range nodes[:masters] {
			if err := m.doAll(ctx, []string{"FLUSHALL"}); err != nil {
				return err
			}
		}
	}
	return c.waitConverged(ctx, func(agreed []slotOwner) error {
		if len(agreed) != masters {
			return fmt.Errorf("want %d slot ranges, have %d", masters, len(agreed))
		}
		for i, o := range agreed {
			if o.slots != split[i] || o.master != nodes[i].ID() || len(o.replicas) != replicas {
				return fmt.Errorf("range %d-%d: master %s with %d replicas, want %d-%d on %s with %d",
					o.slots.First, o.slots.Last, o.master, len(o.replicas),
					split[i].First, split[i].Last, nodes[i].ID(), replicas)
			}
		}
		return nil
	})
}

// doAll pipelines cmds and fails on the first error reply.
func (s *Server) doAll(ctx context.Context, cmds ...[]string) error {
	replies, err := s.doMulti(ctx, cmds...)
	if err != nil {
		return err
	}
	for i, r := range replies {
		if rerr, ok := r.(RedisError); ok {
			return fmt.Errorf("redistest: %s %s: %w", s.Addr(), strings.Join(cmds[i], " "), rerr)
		}
	}
	return nil
}

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
						return nil, fmt.Errorf("%s: slots %d-%d list node %s, which is not running",
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

// close is the test cleanup: kill every node.
func (c *Cluster) close() {
	for _, s := range c.Nodes() {
		s.close()
	}
}

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
