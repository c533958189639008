package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// Ports for local servers come from 22000–22767: a cluster node's bus port
// (port+10000) then stays below Linux's ephemeral range (32768 up), where
// an outgoing connection could take it first, and the range stays clear of
// the 10000–21999 the project's test harness uses.
const (
	firstPort = 22000
	lastPort  = 22767
	busOffset = 10000
)

// localRedis runs redis-server processes on 127.0.0.1 for the demo, each in
// a directory of its own under one temporary directory, and stops them all.
// Nothing persists: no RDB, no AOF.
type localRedis struct {
	dir string

	mu    sync.Mutex
	procs []*redisProcess
	used  map[int]bool
}

// redisProcess is one redis-server the demo started.
type redisProcess struct {
	addr string
	dir  string
	cmd  *exec.Cmd
	done chan struct{} // closed once the process has exited and been reaped
}

// newLocalRedis checks that redis-server and redis-cli are on PATH and
// makes the directory the servers will live in.
func newLocalRedis() (*localRedis, error) {
	for _, bin := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(bin); err != nil {
			return nil, fmt.Errorf("%s not found on PATH (Debian/Ubuntu: apt-get install redis-server redis-tools), or pass your own servers with -cluster and -shards: %w", bin, err)
		}
	}
	dir, err := os.MkdirTemp("", "shardcast-demo-")
	if err != nil {
		return nil, err
	}
	return &localRedis{dir: dir, used: make(map[int]bool)}, nil
}

// stop kills every server and removes their directories. It is safe to call
// more than once.
func (l *localRedis) stop() {
	l.mu.Lock()
	procs := l.procs
	l.procs = nil
	l.mu.Unlock()
	for _, p := range procs {
		_ = p.cmd.Process.Kill() // nothing to save: persistence is off
		<-p.done
	}
	_ = os.RemoveAll(l.dir)
}

// standalone starts n standalone servers and returns their addresses.
func (l *localRedis) standalone(ctx context.Context, n int) ([]string, error) {
	addrs := make([]string, n)
	for i := range addrs {
		p, err := l.start(ctx, false)
		if err != nil {
			return nil, err
		}
		addrs[i] = p.addr
	}
	return addrs, nil
}

// cluster starts masters×(1+replicas) cluster nodes, joins them with
// `redis-cli --cluster create` and waits until every node reports
// cluster_state:ok and every replica's link to its master is up. It
// returns the nodes' addresses.
func (l *localRedis) cluster(ctx context.Context, masters, replicas int) ([]string, error) {
	addrs := make([]string, masters*(1+replicas))
	for i := range addrs {
		p, err := l.start(ctx, true)
		if err != nil {
			return nil, err
		}
		addrs[i] = p.addr
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	if out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("redis-cli --cluster create: %w\n%s", err, out)
	}
	for _, a := range addrs {
		err := waitUntil(ctx, func(ctx context.Context) error { return clusterNodeReady(ctx, a, masters, replicas) })
		if err != nil {
			return nil, fmt.Errorf("cluster node %s: %w", a, err)
		}
	}
	return addrs, nil
}

// clusterNodeReady reports why the node at addr is not ready yet: its
// cluster state is not ok, it is a replica whose link to its master is not
// up, or its slot map does not show every master with all its replicas yet
// (gossip takes a moment to spread them).
func clusterNodeReady(ctx context.Context, addr string, masters, replicas int) error {
	return withNode(ctx, addr, func(n *node) error {
		ranges, err := n.clusterSlots(ctx)
		if err != nil {
			return err
		}
		if len(ranges) != masters {
			return fmt.Errorf("%d slot ranges, want %d", len(ranges), masters)
		}
		for _, r := range ranges {
			if r.Replicas != replicas {
				return fmt.Errorf("master %s listed with %d replicas, want %d", r.Master, r.Replicas, replicas)
			}
		}
		ci, err := n.clusterInfo(ctx)
		if err != nil {
			return err
		}
		if ci["cluster_state"] != "ok" {
			return fmt.Errorf("cluster_state:%s", ci["cluster_state"])
		}
		repl, err := n.info(ctx, "replication")
		if err != nil {
			return err
		}
		if repl["role"] == "slave" && repl["master_link_status"] != "up" {
			return fmt.Errorf("replica link %s", repl["master_link_status"])
		}
		return nil
	})
}

// start launches one server on a free port and waits until it answers
// PING. A port another process took in the meantime makes redis-server
// exit; start then tries another.
func (l *localRedis) start(ctx context.Context, cluster bool) (*redisProcess, error) {
	var lastErr error
	for range 5 {
		port, err := l.freePort(cluster)
		if err != nil {
			return nil, err
		}
		p, err := l.launch(port, cluster)
		if err != nil {
			return nil, err
		}
		err = waitUntil(ctx, func(ctx context.Context) error {
			select {
			case <-p.done:
				return nil // exited: no use waiting
			default:
			}
			return withNode(ctx, p.addr, func(n *node) error { return n.ping(ctx) })
		})
		if err != nil {
			return nil, fmt.Errorf("redis-server on %s: %w", p.addr, err)
		}
		select {
		case <-p.done:
			lastErr = fmt.Errorf("redis-server on %s exited: %s", p.addr, logTail(p.dir))
		default:
			return p, nil
		}
	}
	return nil, lastErr
}

// launch starts redis-server on port. Its output goes to files in its own
// directory, not to the demo's terminal.
func (l *localRedis) launch(port int, cluster bool) (*redisProcess, error) {
	dir := filepath.Join(l.dir, strconv.Itoa(port))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	args := []string{
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no",
		"--dir", dir, "--logfile", "redis.log",
		// Replicas sync at once instead of after the default 5 s delay, and
		// the master pings them every second instead of every 10: CLUSTER
		// SLOTS lists a replica only once its replication offset has moved.
		"--repl-diskless-sync-delay", "0", "--repl-ping-replica-period", "1",
	}
	if cluster {
		args = append(args, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "1000")
	}
	cmd := exec.Command("redis-server", args...)
	cmd.Dir = dir
	cmd.SysProcAttr = childProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &redisProcess{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), dir: dir, cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	l.mu.Lock()
	l.procs = append(l.procs, p)
	l.mu.Unlock()
	return p, nil
}

// freePort returns a port in [firstPort, lastPort] that nothing listens on
// (nor on its bus port, for a cluster node) and that this demo has not
// handed out before.
func (l *localRedis) freePort(cluster bool) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	span := lastPort - firstPort + 1
	start := rand.IntN(span)
	for i := range span {
		port := firstPort + (start+i)%span
		if l.used[port] || !portFree(port) || (cluster && !portFree(port+busOffset)) {
			continue
		}
		l.used[port] = true
		return port, nil
	}
	return 0, fmt.Errorf("no free port in %d-%d", firstPort, lastPort)
}

func portFree(port int) bool {
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	_ = ln.Close()
	return true
}

// logTail returns the last lines of a server's log, to say why it exited.
func logTail(dir string) string {
	b, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-3):], "\n")
}
