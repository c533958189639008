package redistest

import (
	"errors"
	"fmt"
	"os"
	"testing"
)

// BackendEnv names the environment variable that selects how standalone
// servers are run: unset, "" or "process" run redis-server as a child
// process, from PATH or the directory ServerDirEnv names (the default,
// always available); "docker" runs them in containers through
// testcontainers-go, which needs a reachable Docker daemon and a test binary
// built with -tags redistest_docker. Clusters always run redis-server as
// child processes.
const BackendEnv = "SHARDCAST_REDIS_BACKEND"

// installHint is the exact remedy printed when Redis is missing.
const installHint = "install it with: apt-get update && apt-get install -y redis-server redis-tools"

// minMajorVersion is the first Redis with sharded Pub/Sub (SSUBSCRIBE).
const minMajorVersion = 7

// ErrRedisMissing reports that redis-server or redis-cli is not on PATH
// (or in the directory ServerDirEnv names), or is older than Redis 7.
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

// RequireRedis fails the test (never skips it) when the selected backend
// cannot run Redis: by default when redis-server or redis-cli is missing
// from PATH (or from the directory ServerDirEnv names) or older than
// Redis 7, with the command that installs them; with
// SHARDCAST_REDIS_BACKEND=docker when no Docker daemon is reachable.
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
