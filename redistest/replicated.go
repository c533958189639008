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
)

// maxReplicas keeps a typo from starting dozens of processes on a 2-core
// machine.
const maxReplicas = 16

// replicatedStartTimeout bounds StartReplicated. A master with two
// replicas is linked in well under a second; the margin is for load.
const replicatedStartTimeout = 30 * time.Second

// Replicated is a standalone (non-cluster) master with replicas attached by
// REPLICAOF: the shape Sentinel monitors. Which node is master changes when
// Sentinel fails over; Nodes keeps the start order, and Role or
// Sentinels.MasterAddr tell who leads now. The nodes are killed and their
// directories removed when the test ends.
type Replicated struct {
	env   env
	nodes []*Server // nodes[0] started as the master
}

// StartReplicated starts a standalone master and replicas more standalone
// servers, makes each a replica of the master (REPLICAOF 127.0.0.1 port)
// and returns once every replica reports master_link_status:up and the
// master lists them all as online. opts apply to every node (WithTLS: the
// replicas sync over TLS, and Sentinels of the group speak TLS only). It
// fails the test
// if the group cannot be built. Like clusters, the nodes always run as
// child processes.
func StartReplicated(tb testing.TB, replicas int, opts ...Option) *Replicated {
	tb.Helper()
	requireBinaries(tb)
	r := &Replicated{env: tbEnv(tb)}
	tb.Cleanup(r.close)
	began := time.Now()
	if err := r.start(replicas, buildOptions(opts)); err != nil {
		tb.Fatal(err)
	}
	tb.Logf("redistest: replicated group of %s %s ready in %v: master %s, replicas %s",
		build.Name, build.Version(), time.Since(began).Round(time.Millisecond),
		r.Master().Addr(), strings.Join(addrsOf(r.Replicas()), " "))
	return r
}

// StartSharedReplicated is StartReplicated for a process that is not a
// test (a soak): the nodes live in a directory of their own until stop,
// which the caller must call.
func StartSharedReplicated(replicas int, opts ...Option) (r *Replicated, stop func(), err error) {
	if err := findBinaries(); err != nil {
		return nil, nil, err
	}
	root, err := os.MkdirTemp("", "redistest-replicated-")
	if err != nil {
		return nil, nil, fmt.Errorf("redistest: %w", err)
	}
	r = &Replicated{env: sharedEnv(root)}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			r.close()
			_ = os.RemoveAll(root)
		})
	}
	if err := r.start(replicas, buildOptions(opts)); err != nil {
		stop()
		return nil, nil, err
	}
	return r, stop, nil
}

// start checks the shape asked for and builds the group in directories
// of r's env.
func (r *Replicated) start(replicas int, o options) error {
	if replicas < 0 || replicas > maxReplicas {
		return fmt.Errorf("redistest: StartReplicated: need 0 to %d replicas, asked for %d", maxReplicas, replicas)
	}
	dirs := make([]string, 1+replicas)
	for i := range dirs {
		var err error
		if dirs[i], err = r.env.tempDir(); err != nil {
			return fmt.Errorf("redistest: %w", err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), replicatedStartTimeout)
	defer cancel()
	if err := r.build(ctx, dirs, o); err != nil {
		return fmt.Errorf("redistest: start master with %d replicas: %w", replicas, err)
	}
	return nil
}

// build starts every node in parallel, then attaches the replicas.
func (r *Replicated) build(ctx context.Context, dirs []string, o options) error {
	started := make([]*Server, len(dirs))
	errs := make([]error, len(dirs))
	var wg sync.WaitGroup
	for i, dir := range dirs {
		wg.Go(func() { started[i], errs[i] = startProcess(ctx, r.env, dir, false, o) })
	}
	wg.Wait()
	for _, s := range started {
		if s != nil {
			r.nodes = append(r.nodes, s)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	master := r.nodes[0]
	for _, s := range r.nodes[1:] {
		if err := s.doAll(ctx, []string{"REPLICAOF", "127.0.0.1", strconv.Itoa(master.Port())}); err != nil {
			return err
		}
	}
	return r.WaitLinked(ctx, master)
}

// close is the test cleanup: kill every node.
func (r *Replicated) close() {
	for _, s := range r.nodes {
		s.close()
	}
}

// Nodes returns every node in start order: the first master, then the
// replicas.
func (r *Replicated) Nodes() []*Server { return append([]*Server(nil), r.nodes...) }

// Master returns the node started as master. After a failover it may be a
// replica (or dead): ask Sentinels.MasterAddr for the current one.
func (r *Replicated) Master() *Server { return r.nodes[0] }

// Replicas returns the nodes started as replicas, in start order.
func (r *Replicated) Replicas() []*Server { return append([]*Server(nil), r.nodes[1:]...) }

// Node returns the node listening on addr ("127.0.0.1:port"), or nil.
func (r *Replicated) Node(addr string) *Server {
	for _, s := range r.nodes {
		if s.Addr() == addr {
			return s
		}
	}
	return nil
}

// WaitLinked waits until master says role:master and lists every other
// running node as an online replica, and each of those says role:slave,
// follows master and has master_link_status:up. Dead or paused nodes are
// skipped: a killed old master is no one's replica until it restarts.
func (r *Replicated) WaitLinked(ctx context.Context, master *Server) error {
	if r.Node(master.Addr()) != master {
		return fmt.Errorf("%w: %s", ErrNotMember, master.Addr())
	}
	return poll(ctx, func(ctx context.Context) error { return r.checkLinked(ctx, master, nil) })
}

// checkLinked is one round of WaitLinked, leaving out skip (if not nil).
func (r *Replicated) checkLinked(ctx context.Context, master, skip *Server) error {
	var want []*Server
	for _, s := range r.nodes {
		if s != master && s != skip && s.responsive() {
			want = append(want, s)
		}
	}
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	info, err := master.Info(pctx, "replication")
	cancel()
	if err != nil {
		return err
	}
	if info["role"] != "master" {
		return fmt.Errorf("%s: role:%s, want master", master.Addr(), info["role"])
	}
	online := make(map[string]bool)
	for k, v := range info {
		if !strings.HasPrefix(k, "slave") || k == "slave_read_repl_offset" || k == "slave_repl_offset" {
			continue
		}
		f := parseCSVFields(v)
		if f["state"] == "online" {
			online[f["ip"]+":"+f["port"]] = true
		}
	}
	for _, s := range want {
		if !online[s.Addr()] {
			return fmt.Errorf("%s does not list %s as an online replica", master.Addr(), s.Addr())
		}
		pctx, cancel := context.WithTimeout(ctx, probeTimeout)
		info, err := s.Info(pctx, "replication")
		cancel()
		if err != nil {
			return err
		}
		if got := info["master_host"] + ":" + info["master_port"]; info["role"] != "slave" || got != master.Addr() {
			return fmt.Errorf("%s: role:%s following %s, want a replica of %s", s.Addr(), info["role"], got, master.Addr())
		}
		if info["master_link_status"] != "up" {
			return fmt.Errorf("%s: master_link_status:%s", s.Addr(), info["master_link_status"])
		}
	}
	return nil
}

// Role returns the node's INFO replication role ("master" or "slave") and,
// for a replica, the address it follows.
func (s *Server) Role(ctx context.Context) (role, master string, err error) {
	info, err := s.Info(ctx, "replication")
	if err != nil {
		return "", "", err
	}
	if info["role"] == "slave" {
		master = info["master_host"] + ":" + info["master_port"]
	}
	return info["role"], master, nil
}

// parseCSVFields splits "ip=127.0.0.1,port=6380,state=online" (INFO's
// slaveN lines).
func parseCSVFields(v string) map[string]string {
	fields := make(map[string]string)
	for _, kv := range strings.Split(v, ",") {
		if k, val, ok := strings.Cut(kv, "="); ok {
			fields[k] = val
		}
	}
	return fields
}

// addrsOf returns the servers' addresses.
func addrsOf(servers []*Server) []string {
	addrs := make([]string, len(servers))
	for i, s := range servers {
		addrs[i] = s.Addr()
	}
	return addrs
}
