package redistest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

const (
	// maxSentinels keeps a typo from starting dozens of processes.
	maxSentinels = 9
	// sentinelStartTimeout bounds StartSentinels. Sentinels learn of each
	// other from hello messages sent every 2 s, so a healthy set is ready
	// in 2–3 s; the margin is for a loaded machine.
	sentinelStartTimeout = 30 * time.Second
	// DefaultDownAfter is a SentinelGroup's down-after-milliseconds when
	// it sets none: a master that does not answer for this long is
	// subjectively down. Not 1 s: after a switch away from a dead master a
	// Sentinel may wait up to its 1 s reconnect period (SENTINEL DEBUG
	// PING-PERIOD) before it dials the new one, whose down timer starts at
	// the switch; with 1 s it then sees the new master down, and the
	// other Sentinels' "old master down" replies, which stay valid for
	// 5 s, make that objective at once: a second failover (seen on Redis
	// 7.0.15 in 1 run of 12, on Valkey 8.0.1 in 2 of 12).
	DefaultDownAfter = 2 * time.Second
	// DefaultFailoverTimeout is a SentinelGroup's failover-timeout when it
	// sets none. Sentinel also waits twice this long before it retries a
	// failover of the same master.
	DefaultFailoverTimeout = 3 * time.Second
)

// SentinelGroup is one master the Sentinels monitor.
type SentinelGroup struct {
	// Name is the master name clients ask Sentinel for.
	Name string
	// Servers is the master and its replicas. The Sentinels are told of
	// the node started as master (Servers.Master()), which must still be
	// the master, and find the replicas themselves.
	Servers *Replicated
	// Quorum is how many Sentinels must agree the master is down; 0 means
	// a majority of them.
	Quorum int
	// DownAfter and FailoverTimeout are Sentinel's down-after-milliseconds
	// and failover-timeout; zero means DefaultDownAfter and
	// DefaultFailoverTimeout.
	DownAfter, FailoverTimeout time.Duration
}

// Sentinels is a set of Redis Sentinel processes (redis-server --sentinel)
// on loopback, all monitoring the same groups. They are killed and their
// directories removed when the test ends, before the groups they monitor
// if those were started first.
type Sentinels struct {
	env    env
	nodes  []*Server
	groups []SentinelGroup
}

// StartSentinels starts n Sentinels monitoring groups and returns once
// every Sentinel sees every group's master as up, lists all its replicas
// as up with their link to the master up, and knows the other n-1
// Sentinels: from then on a failover can be voted at once. It fails the
// test if they cannot be started or do not converge. Sentinels always run
// as child processes (the binary of Build, with --sentinel). Sentinels of
// groups started WithTLS speak only TLS, with the groups' certificates, to
// their clients, to each other and to the groups.
func StartSentinels(tb testing.TB, n int, groups ...SentinelGroup) *Sentinels {
	tb.Helper()
	requireBinaries(tb)
	s := &Sentinels{env: tbEnv(tb)}
	tb.Cleanup(s.close)
	began := time.Now()
	if err := s.launch(n, groups); err != nil {
		tb.Fatal(err)
	}
	names := make([]string, len(s.groups))
	for i, g := range s.groups {
		names[i] = g.Name
	}
	tb.Logf("redistest: %d sentinels of %s %s ready in %v: %s, monitoring %s",
		n, build.Name, build.Version(), time.Since(began).Round(time.Millisecond),
		strings.Join(s.Addrs(), " "), strings.Join(names, " "))
	return s
}

// StartSharedSentinels is StartSentinels for a process that is not a test
// (a soak): the Sentinels live in a directory of their own until stop,
// which the caller must call.
func StartSharedSentinels(n int, groups ...SentinelGroup) (s *Sentinels, stop func(), err error) {
	if err := findBinaries(); err != nil {
		return nil, nil, err
	}
	root, err := os.MkdirTemp("", "redistest-sentinels-")
	if err != nil {
		return nil, nil, fmt.Errorf("redistest: %w", err)
	}
	s = &Sentinels{env: sharedEnv(root)}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			s.close()
			_ = os.RemoveAll(root)
		})
	}
	if err := s.launch(n, groups); err != nil {
		stop()
		return nil, nil, err
	}
	return s, stop, nil
}

// launch checks n and groups, fills in the groups' defaults, starts the
// Sentinels in directories of s's env and waits until they converge.
func (s *Sentinels) launch(n int, groups []SentinelGroup) error {
	if n < 1 || n > maxSentinels {
		return fmt.Errorf("redistest: StartSentinels: need 1 to %d sentinels, asked for %d", maxSentinels, n)
	}
	if len(groups) == 0 {
		return errors.New("redistest: StartSentinels: no group to monitor")
	}
	groups = slices.Clone(groups) // defaults are filled in below
	seen := make(map[string]bool)
	for i, g := range groups {
		if g.Name == "" || strings.ContainsAny(g.Name, " \t\r\n\"'") || g.Servers == nil || seen[g.Name] {
			return fmt.Errorf("redistest: StartSentinels: group %d needs a unique name without spaces or quotes and its Servers", i)
		}
		seen[g.Name] = true
		if g.Quorum == 0 {
			groups[i].Quorum = n/2 + 1
		}
		if groups[i].Quorum < 1 || groups[i].Quorum > n {
			return fmt.Errorf("redistest: StartSentinels: group %s: quorum %d of %d sentinels", g.Name, groups[i].Quorum, n)
		}
		if g.DownAfter == 0 {
			groups[i].DownAfter = DefaultDownAfter
		}
		if g.FailoverTimeout == 0 {
			groups[i].FailoverTimeout = DefaultFailoverTimeout
		}
		if (g.Servers.Master().certs != nil) != (groups[0].Servers.Master().certs != nil) {
			return errors.New("redistest: StartSentinels: some groups were started WithTLS and some not")
		}
	}
	s.groups = groups
	dirs := make([]string, n)
	for i := range dirs {
		var err error
		if dirs[i], err = s.env.tempDir(); err != nil {
			return fmt.Errorf("redistest: %w", err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), sentinelStartTimeout)
	defer cancel()
	if err := s.start(ctx, dirs); err != nil {
		return fmt.Errorf("redistest: start %d sentinels: %w", n, err)
	}
	if err := s.WaitReady(ctx); err != nil {
		return fmt.Errorf("redistest: %d sentinels did not converge: %w\n%s", n, err, s.describe())
	}
	return nil
}

// start launches one Sentinel per directory, in parallel.
func (s *Sentinels) start(ctx context.Context, dirs []string) error {
	started := make([]*Server, len(dirs))
	errs := make([]error, len(dirs))
	var wg sync.WaitGroup
	for i, dir := range dirs {
		wg.Go(func() { started[i], errs[i] = startSentinel(ctx, s.env, dir, s.groups) })
	}
	wg.Wait()
	for _, srv := range started {
		if srv != nil {
			s.nodes = append(s.nodes, srv)
		}
	}
	return errors.Join(errs...)
}

// startSentinel writes a Sentinel configuration and starts it, retrying on
// a new port if the port was lost to another process, as startProcess does.
func startSentinel(ctx context.Context, e env, dir string, groups []SentinelGroup) (*Server, error) {
	conf := filepath.Join(dir, "sentinel.conf")
	var lastErr error
	for attempt := 1; attempt <= startAttempts; attempt++ {
		res, err := reservePort()
		if err != nil {
			return nil, err
		}
		// Sentinel rewrites its file (its ID, what it learns): a fresh one
		// per attempt.
		if err := os.WriteFile(conf, []byte(sentinelConfig(res.port, dir, groups)), 0o644); err != nil {
			res.release()
			return nil, fmt.Errorf("redistest: %w", err)
		}
		args := []string{conf, "--sentinel"}
		srv := &Server{env: e, dir: dir, port: res.port, res: res}
		if c := groups[0].Servers.Master().certs; c != nil {
			// After the file's port, which it turns off.
			args = append(args, tlsArgs(strconv.Itoa(res.port), c)...)
			srv.tls, srv.certs = c.ClientTLS(), c
		}
		inst := newProcessInstance(build.Path, dir, args)
		srv.inst = inst
		if err = srv.launch(ctx); err == nil {
			return srv, nil
		}
		e.logf("redistest: sentinel on 127.0.0.1:%d (dir %s) failed to start, attempt %d/%d: %v\n%s",
			res.port, dir, attempt, startAttempts, err, inst.describe())
		_ = inst.kill()
		inst.close()
		res.release()
		lastErr = fmt.Errorf("sentinel 127.0.0.1:%d: %w", res.port, err)
		if ctx.Err() != nil || !inst.lostPort() {
			break
		}
		_ = os.Remove(inst.outPath)
		_ = os.Remove(inst.logPath)
	}
	return nil, lastErr
}

// sentinelConfig is a Sentinel's configuration file. Everything is by IP
// on loopback, so hostnames are neither resolved nor announced; replicas
// are reconfigured all at once after a failover (parallel-syncs), since
// the test groups hold no data worth the wait.
func sentinelConfig(port int, dir string, groups []SentinelGroup) string {
	var b strings.Builder
	fmt.Fprintf(&b, "port %d\nbind 127.0.0.1\ndaemonize no\n", port)
	fmt.Fprintf(&b, "dir %q\nlogfile %q\n", dir, filepath.Join(dir, "redis.log"))
	b.WriteString("sentinel resolve-hostnames no\nsentinel announce-hostnames no\n")
	for _, g := range groups {
		fmt.Fprintf(&b, "sentinel monitor %s 127.0.0.1 %d %d\n", g.Name, g.Servers.Master().Port(), g.Quorum)
		fmt.Fprintf(&b, "sentinel down-after-milliseconds %s %d\n", g.Name, g.DownAfter.Milliseconds())
		fmt.Fprintf(&b, "sentinel failover-timeout %s %d\n", g.Name, g.FailoverTimeout.Milliseconds())
		fmt.Fprintf(&b, "sentinel parallel-syncs %s %d\n", g.Name, max(1, len(g.Servers.Replicas())))
	}
	return b.String()
}

// close is the test cleanup: kill every Sentinel.
func (s *Sentinels) close() {
	for _, srv := range s.nodes {
		srv.close()
	}
}

// Nodes returns the Sentinel processes, in start order. Kill, Pause and
// Restart work on them as on any server; a restarted Sentinel keeps the
// configuration it rewrote (its ID, the masters it learnt).
func (s *Sentinels) Nodes() []*Server { return append([]*Server(nil), s.nodes...) }

// Addrs returns the Sentinels' "127.0.0.1:port" addresses, in start order.
func (s *Sentinels) Addrs() []string { return addrsOf(s.nodes) }

// URL returns the sharded engine's address of the named master through
// these Sentinels: "redis+sentinel://127.0.0.1:p1,127.0.0.1:p2/name"
// (rediss+sentinel:// for groups started WithTLS).
func (s *Sentinels) URL(name string) string {
	scheme := "redis+sentinel://"
	if s.nodes[0].certs != nil {
		scheme = "rediss+sentinel://"
	}
	return scheme + strings.Join(s.Addrs(), ",") + "/" + name
}

// Group returns the monitored group called name, or false.
func (s *Sentinels) Group(name string) (SentinelGroup, bool) {
	for _, g := range s.groups {
		if g.Name == name {
			return g, true
		}
	}
	return SentinelGroup{}, false
}

// describe tails every Sentinel's log, for a failed start.
func (s *Sentinels) describe() string {
	var b strings.Builder
	for _, srv := range s.nodes {
		fmt.Fprintf(&b, "=== sentinel %s ===\n%s\n", srv.Addr(), srv.inst.describe())
	}
	return b.String()
}
