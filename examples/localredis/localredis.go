// Package localredis starts throwaway redis-server processes on 127.0.0.1
// for the examples: standalone instances and clusters with replicas, each
// server in a directory of its own under one temporary directory, with
// nothing persisted. It needs only redis-server and redis-cli on PATH. It
// is a convenience for trying shardcast out, not a way to run Redis.
package localredis

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Ports come from 22000–22767: a cluster node's bus port (port+10000) then
// stays below Linux's ephemeral range (32768 up), where an outgoing
// connection could take it first, and the range stays clear of the
// 10000–21999 the project's test harness uses.
const (
	firstPort = 22000
	lastPort  = 22767
	busOffset = 10000
)

// Servers are the redis-server processes one program started. Stop kills
// them all; the methods are safe for concurrent use.
type Servers struct {
	dir string

	mu    sync.Mutex
	procs []*process
	used  map[int]bool
}

// process is one redis-server.
type process struct {
	addr string
	dir  string
	cmd  *exec.Cmd
	done chan struct{} // closed once the process has exited and been reaped
}

// New checks that redis-server and redis-cli are on PATH and makes the
// temporary directory the servers will live in, named after name.
func New(name string) (*Servers, error) {
	for _, bin := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(bin); err != nil {
			return nil, fmt.Errorf("%s not found on PATH (Debian/Ubuntu: apt-get install redis-server redis-tools), or give the addresses of servers of your own: %w", bin, err)
		}
	}
	dir, err := os.MkdirTemp("", "shardcast-"+name+"-")
	if err != nil {
		return nil, err
	}
	return &Servers{dir: dir, used: make(map[int]bool)}, nil
}

// Stop kills every server and removes their directories. It is safe to
// call more than once.
func (s *Servers) Stop() {
	s.mu.Lock()
	procs := s.procs
	s.procs = nil
	s.mu.Unlock()
	for _, p := range procs {
		_ = p.cmd.Process.Kill() // nothing to save: persistence is off
		<-p.done
	}
	_ = os.RemoveAll(s.dir)
}

// Standalone starts n standalone servers and returns their addresses.
func (s *Servers) Standalone(ctx context.Context, n int) ([]string, error) {
	addrs := make([]string, n)
	for i := range addrs {
		p, err := s.start(ctx, false)
		if err != nil {
			return nil, err
		}
		addrs[i] = p.addr
	}
	return addrs, nil
}

// Cluster starts masters×(1+replicas) cluster nodes, joins them with
// `redis-cli --cluster create` and returns their addresses, masters first,
// once every node reports cluster_state:ok and knows every other node,
// every replica's link to its master is up, and every node lists all the
// replicas.
func (s *Servers) Cluster(ctx context.Context, masters, replicas int) ([]string, error) {
	addrs := make([]string, masters*(1+replicas))
	for i := range addrs {
		p, err := s.start(ctx, true)
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
		if err := WaitUntil(ctx, func(ctx context.Context) error { return nodeReady(ctx, a, len(addrs), masters*replicas) }); err != nil {
			return nil, fmt.Errorf("cluster node %s: %w", a, err)
		}
	}
	return addrs, nil
}

// nodeReady says why the cluster node at addr is not ready yet, or nil.
func nodeReady(ctx context.Context, addr string, total, replicas int) error {
	ci, err := fields(ctx, addr, "cluster", "info")
	if err != nil {
		return err
	}
	if ci["cluster_state"] != "ok" {
		return fmt.Errorf("cluster_state:%s", ci["cluster_state"])
	}
	if ci["cluster_known_nodes"] != strconv.Itoa(total) {
		return fmt.Errorf("knows %s nodes of %d", ci["cluster_known_nodes"], total)
	}
	repl, err := fields(ctx, addr, "info", "replication")
	if err != nil {
		return err
	}
	if repl["role"] == "slave" && repl["master_link_status"] != "up" {
		return fmt.Errorf("replica link %s", repl["master_link_status"])
	}
	out, err := cli(ctx, addr, "cluster", "nodes")
	if err != nil {
		return err
	}
	n := 0
	for line := range strings.Lines(out) {
		// <id> <ip:port@bus> <flags> …; flags such as "myself,slave".
		if f := strings.Fields(line); len(f) > 2 && slices.Contains(strings.Split(f[2], ","), "slave") {
			n++
		}
	}
	if n != replicas {
		return fmt.Errorf("lists %d replicas of %d", n, replicas)
	}
	return nil
}

// cli runs redis-cli against addr and returns its output.
func cli(ctx context.Context, addr string, args ...string) (string, error) {
	host, port, _ := net.SplitHostPort(addr)
	out, err := exec.CommandContext(ctx, "redis-cli", append([]string{"-h", host, "-p", port}, args...)...).Output()
	if err != nil {
		return "", fmt.Errorf("redis-cli %s: %w", strings.Join(args, " "), err)
	}
	return string(out), nil
}

// fields runs an INFO-like command and returns its "field:value" lines.
func fields(ctx context.Context, addr string, args ...string) (map[string]string, error) {
	out, err := cli(ctx, addr, args...)
	if err != nil {
		return nil, err
	}
	m := make(map[string]string)
	for line := range strings.Lines(out) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			m[k] = v
		}
	}
	return m, nil
}

// start launches one server on a free port and waits until it answers
// PING. A port another process took in the meantime makes redis-server
// exit; start then tries another.
func (s *Servers) start(ctx context.Context, cluster bool) (*process, error) {
	var lastErr error
	for range 5 {
		port, err := s.freePort(cluster)
		if err != nil {
			return nil, err
		}
		p, err := s.launch(port, cluster)
		if err != nil {
			return nil, err
		}
		err = WaitUntil(ctx, func(ctx context.Context) error {
			select {
			case <-p.done:
				return nil // exited: no use waiting
			default:
			}
			out, err := cli(ctx, p.addr, "ping")
			if err == nil && strings.TrimSpace(out) != "PONG" {
				err = fmt.Errorf("PING answered %q", out)
			}
			return err
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
// directory, not to the program's terminal.
func (s *Servers) launch(port int, cluster bool) (*process, error) {
	dir := filepath.Join(s.dir, strconv.Itoa(port))
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
	p := &process{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), dir: dir, cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	s.mu.Lock()
	s.procs = append(s.procs, p)
	s.mu.Unlock()
	return p, nil
}

// freePort returns a port in [firstPort, lastPort] that nothing listens on
// (nor on its bus port, for a cluster node) and that was not handed out
// before.
func (s *Servers) freePort(cluster bool) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	span := lastPort - firstPort + 1
	start := rand.IntN(span)
	for i := range span {
		port := firstPort + (start+i)%span
		if s.used[port] || !portFree(port) || (cluster && !portFree(port+busOffset)) {
			continue
		}
		s.used[port] = true
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

// WaitUntil calls check every 10 ms until it returns nil, giving up after
// 30 s (or when ctx ends) with check's last error.
func WaitUntil(ctx context.Context, check func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		err := check(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-tick.C:
		}
	}
}
