package redistest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"sync"
	"testing"
)

// BackendEnv names the environment variable that selects how standalone
// servers are run: unset, "" or "process" run redis-server from PATH (the
// default, always available); "docker" runs them in containers through
// testcontainers-go, which needs a reachable Docker daemon and a test binary
// built with -tags redistest_docker. Clusters always use redis-server from
// PATH.
const BackendEnv = "SHARDCAST_REDIS_BACKEND"

// installHint is the exact remedy printed when Redis is missing.
const installHint = "install it with: apt-get update && apt-get install -y redis-server redis-tools"

// minMajorVersion is the first Redis with sharded Pub/Sub (SSUBSCRIBE).
const minMajorVersion = 7

// ErrRedisMissing reports that redis-server or redis-cli is not on PATH, or
// is older than Redis 7.
var ErrRedisMissing = errors.New("redistest: Redis 7+ (redis-server, redis-cli) not available")

type backend int

const (
	backendProcess backend = iota
	backendDocker
)

func backendFromEnv() (backend, error) {
	switch v := os.Getenv(BackendEnv); v {
	case "", "process":
		return backendProcess, nil
	case "docker":
		return backendDocker, nil
	default:
		return 0, fmt.Errorf("redistest: %s=%q: want \"process\" or \"docker\"", BackendEnv, v)
	}
}

var (
	binOnce        sync.Once
	binErr         error
	redisServerBin string
)

var versionRE = regexp.MustCompile(`v=(\d+)\.(\d+)\.(\d+)`)

// findBinaries locates redis-server and redis-cli once per process and
// checks that the server is Redis 7 or newer.
func findBinaries() error {
	binOnce.Do(func() { redisServerBin, binErr = lookupBinaries() })
	return binErr
}

// lookupBinaries does the work of findBinaries, uncached. redis-cli is not
// used by the harness, but tests and scripts of the project shell out to it.
func lookupBinaries() (server string, err error) {
	if server, err = exec.LookPath("redis-server"); err != nil {
		return "", fmt.Errorf("%w: redis-server not found on PATH; %s", ErrRedisMissing, installHint)
	}
	if _, err = exec.LookPath("redis-cli"); err != nil {
		return "", fmt.Errorf("%w: redis-cli not found on PATH; %s", ErrRedisMissing, installHint)
	}
	out, err := exec.Command(server, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("%w: %s --version: %v; %s", ErrRedisMissing, server, err, installHint)
	}
	m := versionRE.FindSubmatch(out)
	if m == nil {
		return "", fmt.Errorf("%w: cannot read the version in %q", ErrRedisMissing, out)
	}
	if major, _ := strconv.Atoi(string(m[1])); major < minMajorVersion {
		return "", fmt.Errorf("%w: %s is version %s.%s.%s, sharded Pub/Sub needs %d.0+; %s",
			ErrRedisMissing, server, m[1], m[2], m[3], minMajorVersion, installHint)
	}
	return server, nil
}

// RequireRedis fails the test (never skips it) when the selected backend
// cannot run Redis: by default when redis-server or redis-cli is missing
// from PATH or older than Redis 7, with the command that installs them;
// with SHARDCAST_REDIS_BACKEND=docker when no Docker daemon is reachable.
// StartStandalone and StartCluster call it themselves.
func RequireRedis(tb testing.TB) {
	tb.Helper()
	b, err := backendFromEnv()
	if err != nil {
		tb.Fatal(err)
	}
	if b == backendDocker {
		if err := dockerAvailable(); err != nil {
			tb.Fatal(err)
		}
		return
	}
	if err := findBinaries(); err != nil {
		tb.Fatal(err)
	}
}

// requireBinaries is RequireRedis for the process backend only: clusters
// need local binaries whatever the backend setting.
func requireBinaries(tb testing.TB) {
	tb.Helper()
	if err := findBinaries(); err != nil {
		tb.Fatal(err)
	}
}
