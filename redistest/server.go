package redistest

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardcast/shardcast/internal/resp"
)

// Errors returned by Server methods.
var (
	// ErrNotRunning is returned by Pause and Resume when the server has
	// been killed or stopped (or has crashed) and not restarted.
	ErrNotRunning = errors.New("redistest: server not running")
	// ErrClosed is returned by lifecycle methods after the test's cleanup
	// has shut the server down for good.
	ErrClosed = errors.New("redistest: server closed by test cleanup")
)

const (
	// startTimeout bounds one server start including its readiness wait;
	// generous because the 2-core test machines are shared and noisy.
	startTimeout = 20 * time.Second
	// startAttempts covers losing a port to an unrelated process between
	// the free-port probe and redis-server's bind.
	startAttempts = 4
	// pingTimeout bounds one readiness probe.
	pingTimeout = 250 * time.Millisecond
)

// Server is one redis-server started by this package for one test. It is
// killed, waited for and its directory removed by the test's cleanup. Its
// methods are safe for concurrent use.
type Server struct {
	env     env
	dir     string
	port    int
	cluster bool
	res     *portReservation
	// tls is the harness's client configuration for a server started
	// WithTLS, nil for plain TCP.
	tls *tls.Config
	// certs are the certificates of a server started WithTLS.
	certs *Certs

	// login is the AUTH the harness sends on each of its connections
	// (nil: none), set by Sentinels.RequirePassword. Not under mu: dial
	// runs with mu held (a restart's readiness check).
	login atomic.Pointer[[]string]

	mu     sync.Mutex
	inst   instance
	id     string // cluster node ID; stable across restarts (nodes.conf)
	paused bool
	down   bool // killed or stopped, not restarted
	closed bool
}

// StartStandalone starts a standalone Redis on a free loopback port and
// returns once it answers PING. The server is killed and its directory
// removed when the test ends. It fails the test if Redis cannot be started.
//
// With SHARDCAST_REDIS_BACKEND=docker (and -tags redistest_docker) the
// server runs in a container instead; PID then reports the container's
// main process as seen from the host.
func StartStandalone(tb testing.TB, opts ...Option) *Server {
	tb.Helper()
	RequireRedis(tb)
	o := buildOptions(opts)
	// TempDir's own removal is registered on its first call; taking the
	// directory before registering our cleanup makes the removal run after
	// the server is dead (cleanups run last-in first-out).
	dir := tb.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	began := time.Now()
	b, _ := backendFromEnv()
	var (
		s   *Server
		err error
	)
	if b == backendDocker {
		if o.certs != nil {
			tb.Fatal("redistest: WithTLS needs redis-server as a child process, not the Docker backend")
		}
		s, err = startDocker(ctx, tbEnv(tb), dir, o)
	} else {
		s, err = startProcess(ctx, tbEnv(tb), dir, false, o)
	}
	if err != nil {
		tb.Fatalf("redistest: start standalone redis: %v", err)
	}
	tb.Cleanup(s.close)
	server := "in docker"
	if b != backendDocker {
		server = build.Name + " " + build.Version()
	}
	tb.Logf("redistest: standalone redis %s (%s, pid %d, dir %s) ready in %v",
		s.Addr(), server, s.PID(), dir, time.Since(began).Round(time.Millisecond))
	return s
}

// serverArgs is the redis-server command line. Everything is tuned for
// throwaway test servers: no persistence, loopback only, fast replication
// and failure detection, and topology changes only when a test asks.
func serverArgs(port int, dir string, cluster bool, o options) []string {
	args := []string{
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--daemonize", "no",
		"--save", "",
		"--appendonly", "no",
		"--dir", dir,
		"--logfile", filepath.Join(dir, "redis.log"),
		// The default 5 s delay leaves a new replica unsynced for 5 s after
		// it attached; tests would fail over to an empty, unlinked replica.
		"--repl-diskless-sync-delay", "0",
		// DEBUG (SLEEP, SEGFAULT…) from loopback, for fault-injection tests.
		"--enable-debug-command", "local",
	}
	if cluster {
		args = append(args,
			"--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(dir, "nodes.conf"),
			"--cluster-node-timeout", "1000",
			// A replica whose master was paused for a while must still be
			// allowed to take over; with the default factor it can refuse.
			"--cluster-replica-validity-factor", "0",
			// Replicas must not wander to other masters, and a master that
			// lost its last slot must not turn itself into a replica: the
			// topology changes only when a test changes it.
			"--cluster-allow-replica-migration", "no",
			// CLUSTER SLOTS leaves out replicas whose replication offset is
			// still 0; on an idle master only its PINGs to the replicas move
			// the offset, every 10 s by default. Clients discovering replicas
			// would not see them for up to 10 s.
			"--repl-ping-replica-period", "1",
		)
	}
	if o.certs != nil {
		// After --port, which it turns off.
		args = append(args, tlsArgs(strconv.Itoa(port), o.certs)...)
	}
	return append(args, o.args...)
}

// startProcess starts redis-server as a child process, retrying on a new
// port if the server dies during startup (most likely a port lost to an
// unrelated process after our probe).
func startProcess(ctx context.Context, e env, dir string, cluster bool, o options) (*Server, error) {
	if err := findBinaries(); err != nil {
		return nil, err
	}
	var lastErr error
	for attempt := 1; attempt <= startAttempts; attempt++ {
		res, err := reservePort()
		if err != nil {
			return nil, err
		}
		inst := newProcessInstance(build.Path, dir, serverArgs(res.port, dir, cluster, o))
		s := &Server{env: e, dir: dir, port: res.port, cluster: cluster, res: res, inst: inst}
		if o.certs != nil {
			s.tls, s.certs = o.certs.ClientTLS(), o.certs
		}
		if err = s.launch(ctx); err == nil {
			return s, nil
		}
		e.logf("redistest: redis-server on 127.0.0.1:%d (dir %s) failed to start, attempt %d/%d: %v\n%s",
			res.port, dir, attempt, startAttempts, err, inst.describe())
		_ = inst.kill()
		inst.close()
		res.release()
		lastErr = fmt.Errorf("127.0.0.1:%d: %w", res.port, err)
		// Only a port taken behind our back is worth another try; a bad
		// argument or a broken install fails the same way every time.
		if ctx.Err() != nil || !inst.lostPort() {
			break
		}
		// A half-written nodes.conf would carry the failed attempt's
		// identity and port into the next one.
		_ = os.Remove(filepath.Join(dir, "nodes.conf"))
		// Fresh log files, so the next attempt's own lines are checked.
		_ = os.Remove(inst.outPath)
		_ = os.Remove(inst.logPath)
	}
	return nil, lastErr
}

// launch starts the instance and waits until it answers PING.
func (s *Server) launch(ctx context.Context) error {
	if err := s.inst.start(); err != nil {
		return err
	}
	return s.waitReady(ctx)
}

// waitReady polls PING until the server answers PONG, exits, or ctx ends.
func (s *Server) waitReady(ctx context.Context) error {
	exited := s.inst.exited()
	delay := 2 * time.Millisecond
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	for {
		pctx, cancel := context.WithTimeout(ctx, pingTimeout)
		reply, err := s.Do(pctx, "PING")
		cancel()
		if err == nil && reply == "PONG" {
			return nil
		}
		if err == nil {
			err = fmt.Errorf("PING answered %v", reply)
		}
		timer.Reset(delay)
		select {
		case <-exited:
			return fmt.Errorf("redis-server exited before answering PING (last probe: %v)", err)
		case <-ctx.Done():
			return fmt.Errorf("redis-server not answering PING: %w (last probe: %v)", ctx.Err(), err)
		case <-timer.C:
		}
		delay = min(delay*2, 10*time.Millisecond)
	}
}

// close is the test cleanup: kill, reap, release the ports.
func (s *Server) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.closed = true
	if err := s.inst.kill(); err != nil {
		s.env.errorf("redistest: cleanup of %s: %v", s.Addr(), err)
	}
	s.inst.close()
	s.res.release()
}

// Addr returns "127.0.0.1:<port>".
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Port returns the client port. It stays the same across Restart.
func (s *Server) Port() int { return s.port }

// Dir returns the server's working directory (logs, nodes.conf).
func (s *Server) Dir() string { return s.dir }

// ID returns the cluster node ID, or "" for a standalone server. It stays
// the same across Restart because the node keeps its nodes.conf.
func (s *Server) ID() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.id
}

// PID returns the process ID of the running server, or 0 when it is not
// running.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inst.pid()
}

// Running reports whether the server process is alive (it may be paused).
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.runningLocked()
}

func (s *Server) runningLocked() bool {
	if s.closed || s.down {
		return false
	}
	select {
	case <-s.inst.exited():
		return false
	default:
		return true
	}
}

// Paused reports whether the server is frozen by Pause.
func (s *Server) Paused() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.paused && s.runningLocked()
}

// responsive reports whether the server should answer commands: running
// and not paused.
func (s *Server) responsive() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.runningLocked() && !s.paused
}

// Kill sends SIGKILL (a crash: no shutdown, connections reset) and returns
// once the process is gone. Killing a server that is not running is a no-op.
func (s *Server) Kill() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	s.down, s.paused = true, false
	return s.inst.kill()
}

// Stop shuts the server down cleanly (SIGTERM, then SIGKILL if it has not
// exited within 10 s) and returns once it is gone. A paused server is
// continued so that it can act on SIGTERM.
func (s *Server) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	s.down, s.paused = true, false
	return s.inst.terminate()
}

// Pause freezes the server with SIGSTOP: its sockets stay open and silent,
// as on a hung host. Resume thaws it.
func (s *Server) Pause() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if !s.runningLocked() {
		return ErrNotRunning
	}
	if err := s.inst.pause(); err != nil {
		return err
	}
	s.paused = true
	return nil
}

// Resume continues a paused server with SIGCONT.
func (s *Server) Resume() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if !s.runningLocked() {
		return ErrNotRunning
	}
	if err := s.inst.resume(); err != nil {
		return err
	}
	s.paused = false
	return nil
}

// Restart starts the server again on the same port, directory and
// configuration, killing it first if it is still running, and returns once
// it answers PING (bounded by ctx). A cluster node reloads its nodes.conf
// and rejoins the cluster with its old identity; use Cluster.RestartNode to
// also wait until the cluster has converged.
func (s *Server) Restart(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if err := s.inst.kill(); err != nil {
		return err
	}
	s.paused = false
	if err := s.launch(ctx); err != nil {
		desc := s.inst.describe()
		s.env.logf("redistest: restart of %s failed: %v\n%s", s.Addr(), err, desc)
		_ = s.inst.kill()
		s.down = true
		return fmt.Errorf("redistest: restart %s: %w", s.Addr(), err)
	}
	s.down = false
	return nil
}

// Do runs one command on this server over a fresh connection and returns
// the reply: string for simple and bulk strings, int64 for integers, nil
// for null, []any for arrays (error elements as *resp.ServerError values).
// An error reply is returned as a *resp.ServerError error. Without a ctx
// deadline the call gives up after 10 s, so a paused server cannot hang the
// test.
func (s *Server) Do(ctx context.Context, args ...string) (any, error) {
	replies, err := s.doMulti(ctx, args)
	if err != nil {
		return nil, err
	}
	if rerr, ok := replies[0].(*resp.ServerError); ok {
		return nil, rerr
	}
	return replies[0], nil
}

// doMulti pipelines cmds over one fresh connection. Error replies stay in
// the slice as *resp.ServerError values.
func (s *Server) doMulti(ctx context.Context, cmds ...[]string) ([]any, error) {
	if len(cmds) == 0 {
		return nil, nil
	}
	for _, cmd := range cmds {
		if len(cmd) == 0 {
			return nil, errors.New("redistest: empty command")
		}
	}
	c, err := s.dial(ctx)
	if err != nil {
		return nil, err
	}
	defer c.close()
	return c.do(ctx, cmds...)
}
