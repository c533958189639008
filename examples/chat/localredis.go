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
	"time"
)

// Ports for the local cluster come from 22000–22767, as in examples/demo:
// a node's bus port (port+10000) then stays below Linux's ephemeral range,
// and the range stays clear of the 10000–21999 the project's test harness
// uses.
const (
	firstPort = 22000
	lastPort  = 22767
	busOffset = 10000
)

// localCluster is a Redis Cluster of redis-server processes on 127.0.0.1,
// each in its own directory under one temporary directory. Nothing
// persists. stop kills every process and removes the directories.
type localCluster struct {
	Addrs []string // every node, masters first

	dir   string
	procs []*redisProcess
}

type redisProcess struct {
	addr string
	dir  string
	cmd  *exec.Cmd
	done chan struct{} // closed once the process has exited and been reaped
}

// startLocalCluster starts masters×(1+replicas) cluster nodes, joins them
// with `redis-cli --cluster create` and returns once every node reports
// cluster_state:ok, knows every other node, and every replica is linked to
// its master. On error it has stopped whatever it started.
func startLocalCluster(ctx context.Context, masters, replicas int) (_ *localCluster, err error) {
	for _, bin := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(bin); err != nil {
			return nil, fmt.Errorf("%s not found on PATH (Debian/Ubuntu: apt-get install redis-server redis-tools), or pass your own cluster with -cluster: %w", bin, err)
		}
	}
	dir, err := os.MkdirTemp("", "shardcast-chat-")
	if err != nil {
		return nil, err
	}
	c := &localCluster{dir: dir}
	defer func() {
		if err != nil {
			c.stop()
		}
	}()
	used := make(map[int]bool)
	total := masters * (1 + replicas)
	for range total {
		p, err := c.start(ctx, used)
		if err != nil {
			return nil, err
		}
		c.Addrs = append(c.Addrs, p.addr)
	}
	args := append([]string{"--cluster", "create"}, c.Addrs...)
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	if out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("redis-cli --cluster create: %w\n%s", err, out)
	}
	for _, addr := range c.Addrs {
		err := waitFor(ctx, 30*time.Second, func() error { return nodeReady(ctx, addr, total) })
		if err != nil {
			return nil, fmt.Errorf("cluster node %s: %w", addr, err)
		}
	}
	return c, nil
}

// nodeReady says why the node at addr is not ready yet, or nil.
func nodeReady(ctx context.Context, addr string, total int) error {
	ci, err := redisInfo(ctx, addr, "cluster", "info")
	if err != nil {
		return err
	}
	if ci["cluster_state"] != "ok" {
		return fmt.Errorf("cluster_state:%s", ci["cluster_state"])
	}
	if ci["cluster_known_nodes"] != strconv.Itoa(total) {
		return fmt.Errorf("knows %s nodes of %d", ci["cluster_known_nodes"], total)
	}
	repl, err := redisInfo(ctx, addr, "info", "replication")
	if err != nil {
		return err
	}
	if repl["role"] == "slave" && repl["master_link_status"] != "up" {
		return fmt.Errorf("replica link %s", repl["master_link_status"])
	}
	return nil
}

// redisInfo runs an INFO-like command through redis-cli and returns its
// "field:value" lines as a map.
func redisInfo(ctx context.Context, addr string, args ...string) (map[string]string, error) {
	host, port, _ := net.SplitHostPort(addr)
	out, err := exec.CommandContext(ctx, "redis-cli", append([]string{"-h", host, "-p", port}, args...)...).Output()
	if err != nil {
		return nil, fmt.Errorf("redis-cli %s: %w", strings.Join(args, " "), err)
	}
	fields := make(map[string]string)
	for line := range strings.Lines(string(out)) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			fields[k] = v
		}
	}
	return fields, nil
}

// stop kills every server and removes their directories. Safe to call more
// than once.
func (c *localCluster) stop() {
	for _, p := range c.procs {
		_ = p.cmd.Process.Kill() // nothing to save: persistence is off
		<-p.done
	}
	c.procs = nil
	_ = os.RemoveAll(c.dir)
}

// start launches one cluster node on a free port and waits until it
// answers PING. A port another process took in the meantime makes
// redis-server exit; start then tries another.
func (c *localCluster) start(ctx context.Context, used map[int]bool) (*redisProcess, error) {
	var lastErr error
	for range 5 {
		port, err := freePort(used)
		if err != nil {
			return nil, err
		}
		p, err := c.launch(port)
		if err != nil {
			return nil, err
		}
		err = waitFor(ctx, 10*time.Second, func() error {
			select {
			case <-p.done:
				return nil // exited: no use waiting
			default:
			}
			_, err := redisInfo(ctx, p.addr, "info", "server")
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

// launch starts redis-server on port, its log in its own directory.
func (c *localCluster) launch(port int) (*redisProcess, error) {
	dir := filepath.Join(c.dir, strconv.Itoa(port))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	cmd := exec.Command("redis-server",
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no",
		"--dir", dir, "--logfile", "redis.log",
		"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
		"--cluster-node-timeout", "1000",
		// Replicas sync at once instead of after the default 5 s delay.
		"--repl-diskless-sync-delay", "0",
	)
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
	c.procs = append(c.procs, p)
	return p, nil
}

var portMu sync.Mutex // tests start clusters concurrently

// freePort returns a port in [firstPort, lastPort] that nothing listens on,
// nor on its bus port, and that is not in used.
func freePort(used map[int]bool) (int, error) {
	portMu.Lock()
	defer portMu.Unlock()
	span := lastPort - firstPort + 1
	start := rand.IntN(span)
	for i := range span {
		port := firstPort + (start+i)%span
		if used[port] || !portFree(port) || !portFree(port+busOffset) {
			continue
		}
		used[port] = true
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

// waitFor calls check until it returns nil, ctx ends or timeout passes.
func waitFor(ctx context.Context, timeout time.Duration, check func() error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		err := check()
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
