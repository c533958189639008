// Package launch starts throwaway local Redis servers for the benchmark:
// standalone instances and clusters on free loopback ports, every process
// owned by this one and killed by PID when the benchmark ends (also on
// Ctrl-C, and by the kernel if the benchmark itself dies: Pdeathsig).
package launch

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Ports are picked from [portLow, portHigh): the cluster bus adds 10000,
// and both must stay below the ephemeral range (32768).
const (
	portLow  = 19000
	portHigh = 22700
)

// Set owns every redis-server process started through it.
type Set struct {
	mu    sync.Mutex
	dir   string
	procs []*exec.Cmd
	next  int
}

// NewSet makes a Set whose servers keep their files under a fresh
// temporary directory.
func NewSet() (*Set, error) {
	dir, err := os.MkdirTemp("", "shardbench-")
	if err != nil {
		return nil, fmt.Errorf("launch: temp dir: %w", err)
	}
	return &Set{dir: dir, next: portLow + os.Getpid()%1000*3}, nil
}

// Close kills every server of the set (by PID) and removes its files.
func (s *Set) Close() {
	s.mu.Lock()
	procs := s.procs
	s.procs = nil
	s.mu.Unlock()
	for _, p := range procs {
		_ = p.Process.Kill()
		_, _ = p.Process.Wait()
	}
	_ = os.RemoveAll(s.dir)
}

// Stop kills the servers at addrs (they must belong to the set).
func (s *Set) Stop(addrs []string) {
	want := map[string]bool{}
	for _, a := range addrs {
		want[a] = true
	}
	s.mu.Lock()
	var keep, kill []*exec.Cmd
	for _, p := range s.procs {
		if want[procAddr(p)] {
			kill = append(kill, p)
		} else {
			keep = append(keep, p)
		}
	}
	s.procs = keep
	s.mu.Unlock()
	for _, p := range kill {
		_ = p.Process.Kill()
		_, _ = p.Process.Wait()
	}
}

func procAddr(p *exec.Cmd) string {
	for i, a := range p.Args {
		if a == "--port" && i+1 < len(p.Args) {
			return "127.0.0.1:" + p.Args[i+1]
		}
	}
	return ""
}

// freePort returns a port whose own and bus (+10000) ports are free now.
func (s *Set) freePort() (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range portHigh - portLow {
		p := s.next
		s.next++
		if s.next >= portHigh {
			s.next = portLow
		}
		if portFree(p) && portFree(p+10000) {
			return p, nil
		}
	}
	return 0, errors.New("launch: no free port pair below 32768")
}

func portFree(p int) bool {
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}

// Standalone starts one standalone redis-server and returns its address
// once it answers PING.
func (s *Set) Standalone() (string, error) {
	return s.start(nil)
}

func (s *Set) start(extra []string) (string, error) {
	return s.startBin("redis-server", extra)
}

// startBin starts the redis-server binary bin (a path, or a name looked
// up in PATH) with the set's usual flags and extra.
func (s *Set) startBin(bin string, extra []string) (string, error) {
	var lastErr error
	for range 5 { // a port can be taken between the check and the bind
		port, err := s.freePort()
		if err != nil {
			return "", err
		}
		dir := filepath.Join(s.dir, strconv.Itoa(port))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", fmt.Errorf("launch: %w", err)
		}
		args := []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
			"--dir", dir, "--repl-diskless-sync-delay", "0", "--protected-mode", "no", "--loglevel", "warning"}
		args = append(args, extra...)
		cmd := exec.Command(bin, args...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		logf, err := os.Create(filepath.Join(dir, "log"))
		if err != nil {
			return "", fmt.Errorf("launch: %w", err)
		}
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			_ = logf.Close()
			return "", fmt.Errorf("launch: start redis-server: %w", err)
		}
		_ = logf.Close()
		s.mu.Lock()
		s.procs = append(s.procs, cmd)
		s.mu.Unlock()
		addr := "127.0.0.1:" + strconv.Itoa(port)
		if err := waitPing(addr, 5*time.Second); err != nil {
			s.Stop([]string{addr})
			lastErr = err
			continue
		}
		return addr, nil
	}
	return "", fmt.Errorf("launch: redis-server did not come up: %w", lastErr)
}

// Cluster starts masters cluster nodes without replicas, creates the
// cluster with redis-cli and returns the node addresses once every node
// reports cluster_state:ok and the same full slot map.
func (s *Set) Cluster(ctx context.Context, masters int) ([]string, error) {
	return s.ClusterReplicas(ctx, masters, 0, "")
}

// ClusterReplicas starts masters*(1+replicas) cluster nodes of the
// redis-server binary bin ("" for the one in PATH; redis-cli is taken
// from bin's folder when it holds one), creates the cluster with
// replicas replicas per master and returns the node addresses (masters
// and replicas, in start order) once every node reports cluster_state:ok
// and knows every other. A replica is not listed in CLUSTER SLOTS until
// its replication offset moves: callers that need it listed write to its
// shard first.
func (s *Set) ClusterReplicas(ctx context.Context, masters, replicas int, bin string) ([]string, error) {
	cli := "redis-cli"
	if bin == "" {
		bin = "redis-server"
	} else if c := filepath.Join(filepath.Dir(bin), "redis-cli"); fileExists(c) {
		cli = c
	}
	nodes := masters * (1 + replicas)
	var addrs []string
	for range nodes {
		addr, err := s.startBin(bin, []string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "1000"})
		if err != nil {
			s.Stop(addrs)
			return nil, err
		}
		addrs = append(addrs, addr)
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput()
	if err != nil {
		s.Stop(addrs)
		return nil, fmt.Errorf("launch: redis-cli --cluster create: %w: %s", err, out)
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, a := range addrs {
		for {
			info, err := Command(a, "CLUSTER", "INFO")
			if err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, "cluster_known_nodes:"+strconv.Itoa(nodes)) {
				break
			}
			if time.Now().After(deadline) {
				s.Stop(addrs)
				return nil, fmt.Errorf("launch: cluster node %s not ok: %v %s", a, err, info)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return addrs, nil
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

func waitPing(addr string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		out, err := Command(addr, "PING")
		if err == nil && out == "PONG" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("launch: %s does not answer PING: %v", addr, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Command sends one command on a fresh connection and returns a simple
// or bulk string reply (or an integer as text). It is for set-up and
// polling, not for hot paths.
func Command(addr string, args ...string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.Write([]byte(b.String())); err != nil {
		return "", err
	}
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return "", errors.New("empty reply")
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return "", errors.New(line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return "", fmt.Errorf("bad bulk header %q", line)
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	}
	return "", fmt.Errorf("unexpected reply %q", line)
}
