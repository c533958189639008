package redistest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardcast/shardcast/internal/resp"
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
	env env
	o   options

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
// is up. The nodes are killed and their directories removed when the test
// ends. It fails the test if the cluster cannot be built. Unlike redis-cli,
// it accepts 1 or 2 masters. Clusters always run redis-server as child
// processes (from PATH, or the directory ServerDirEnv names), whatever
// SHARDCAST_REDIS_BACKEND says.
func StartCluster(tb testing.TB, masters, replicas int, opts ...Option) *Cluster {
	tb.Helper()
	requireBinaries(tb)
	if err := checkShape(masters, replicas); err != nil {
		tb.Fatal(err)
	}
	c := &Cluster{env: tbEnv(tb), o: buildOptions(opts)}
	// Directories first: their removal must be registered before our
	// cleanup so that it runs after the nodes are dead.
	dirs := make([]string, masters*(1+replicas))
	for i := range dirs {
		dirs[i] = tb.TempDir()
	}
	tb.Cleanup(c.close)
	if err := c.build(dirs, masters, replicas); err != nil {
		tb.Fatal(err)
	}
	return c
}

// StartSharedCluster is StartCluster for TestMain, where there is no
// testing.TB: a package can start one cluster for all its tests that only
// publish and subscribe (tests that kill, pause, restart or move slots
// should have their own). Call stop after m.Run, and before any goleak
// check: the cluster's process waiters are goroutines. stop kills the nodes
// and removes their directories; it is idempotent. Progress and failures
// are logged to stderr, which go test shows for a failing package or -v.
func StartSharedCluster(masters, replicas int, opts ...Option) (c *Cluster, stop func(), err error) {
	if err := findBinaries(); err != nil {
		return nil, nil, err
	}
	if err := checkShape(masters, replicas); err != nil {
		return nil, nil, err
	}
	root, err := os.MkdirTemp("", "redistest-shared-")
	if err != nil {
		return nil, nil, fmt.Errorf("redistest: %w", err)
	}
	c = &Cluster{env: sharedEnv(root), o: buildOptions(opts)}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			c.close()
			_ = os.RemoveAll(root)
		})
	}
	dirs := make([]string, masters*(1+replicas))
	for i := range dirs {
		if dirs[i], err = c.env.tempDir(); err != nil {
			stop()
			return nil, nil, fmt.Errorf("redistest: %w", err)
		}
	}
	if err := c.build(dirs, masters, replicas); err != nil {
		stop()
		return nil, nil, err
	}
	return c, stop, nil
}

// ErrBadShape is returned for a cluster shape StartCluster refuses.
var ErrBadShape = fmt.Errorf("redistest: need masters >= 1, replicas >= 0 and at most %d nodes", maxClusterNodes)

func checkShape(masters, replicas int) error {
	if masters < 1 || replicas < 0 || masters*(1+replicas) > maxClusterNodes {
		return fmt.Errorf("%w (asked for %d masters × %d replicas)", ErrBadShape, masters, replicas)
	}
	return nil
}

// build starts one node per directory and forms the cluster.
func (c *Cluster) build(dirs []string, masters, replicas int) error {
	ctx, cancel := context.WithTimeout(context.Background(), clusterStartTimeout)
	defer cancel()
	began := time.Now()
	if err := c.startNodes(ctx, dirs); err != nil {
		return fmt.Errorf("redistest: start cluster nodes: %w", err)
	}
	if err := c.create(ctx, masters, replicas); err != nil {
		return fmt.Errorf("redistest: create %d×%d cluster: %w\n%s", masters, replicas, err, c.describe())
	}
	c.env.logf("redistest: cluster %d×%d of %s %s ready in %v: %s", masters, replicas,
		build.Name, build.Version(), time.Since(began).Round(time.Millisecond), c.describeShort())
	return nil
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
	s, err := startProcess(ctx, c.env, dir, true, c.o)
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
	// Every pair meets directly: all handshakes start at once instead of
	// waiting for gossip to spread the news node by node.
	for i, s := range nodes {
		var meets [][]string
		for _, peer := range nodes[i+1:] {
			meets = append(meets, []string{"CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(peer.Port())})
		}
		if len(meets) > 0 {
			if err := s.doAll(ctx, meets...); err != nil {
				return err
			}
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
		if rerr, ok := r.(*resp.ServerError); ok {
			return fmt.Errorf("redistest: %s %s: %w", s.Addr(), strings.Join(cmds[i], " "), rerr)
		}
	}
	return nil
}

// close is the test cleanup: kill every node.
func (c *Cluster) close() {
	for _, s := range c.Nodes() {
		s.close()
	}
}
