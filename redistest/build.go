package redistest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
)

// ServerDirEnv names the environment variable that picks the server the
// harness runs, for standalone servers and clusters alike: a directory
// holding redis-server and redis-cli (a build of Redis 7+ or Valkey, whose
// compatibility links carry those names). Unset or empty, both come from
// PATH. A directory without them fails every test that needs a server;
// it never falls back to PATH, so a matrix run cannot silently test the
// wrong server.
const ServerDirEnv = "SHARDCAST_REDIS_DIR"

// ServerBuild identifies the redis-server the harness runs, as its
// --version line reports it.
type ServerBuild struct {
	// Path is the redis-server binary; CLI the redis-cli beside it (or on
	// PATH).
	Path, CLI string
	// Name is the server's own name: "Redis" or "Valkey".
	Name string
	// Major, Minor and Patch are its version.
	Major, Minor, Patch int
	// FromDir reports that ServerDirEnv chose it.
	FromDir bool
}

// Version returns "major.minor.patch".
func (b ServerBuild) Version() string {
	return fmt.Sprintf("%d.%d.%d", b.Major, b.Minor, b.Patch)
}

// IsValkey reports whether the server is Valkey rather than Redis.
func (b ServerBuild) IsValkey() bool { return b.Name == "Valkey" }

// AtLeast reports whether the version is major.minor or later.
func (b ServerBuild) AtLeast(major, minor int) bool {
	return b.Major > major || (b.Major == major && b.Minor >= minor)
}

// String is what the harness logs: "Valkey 8.0.1 (/srv/valkey/redis-server,
// from SHARDCAST_REDIS_DIR)".
func (b ServerBuild) String() string {
	from := "from PATH"
	if b.FromDir {
		from = "from " + ServerDirEnv
	}
	return fmt.Sprintf("%s %s (%s, %s)", b.Name, b.Version(), b.Path, from)
}

var (
	buildOnce sync.Once
	buildErr  error
	build     ServerBuild
)

// Build returns the server the harness runs, found once per process (see
// ServerDirEnv), or an error wrapping ErrRedisMissing. The first call logs
// it to stderr, which `go test -v` shows, so every test binary's output
// names the server it ran on.
func Build() (ServerBuild, error) {
	buildOnce.Do(func() {
		build, buildErr = lookupBuild(os.Getenv(ServerDirEnv))
		if buildErr == nil {
			fmt.Fprintf(os.Stderr, "redistest: server %s\n", build)
		}
	})
	return build, buildErr
}

// findBinaries is Build for callers that need only its error.
func findBinaries() error {
	_, err := Build()
	return err
}

// versionRE reads "<Name> server v=<major>.<minor>.<patch>" from
// redis-server --version.
var versionRE = regexp.MustCompile(`^(\S+) server v=(\d+)\.(\d+)\.(\d+)`)

// lookupBuild does the work of Build, uncached: from dir when it is not
// empty, else from PATH. redis-cli is not run by the harness, but the
// project's tests and scripts shell out to it.
func lookupBuild(dir string) (ServerBuild, error) {
	var b ServerBuild
	var err error
	if dir != "" {
		b.FromDir = true
		if b.Path, err = binaryIn(dir, "redis-server"); err == nil {
			b.CLI, err = binaryIn(dir, "redis-cli")
		}
	} else {
		if b.Path, err = exec.LookPath("redis-server"); err != nil {
			return b, fmt.Errorf("%w: redis-server not found on PATH; %s", ErrRedisMissing, installHint)
		}
		if b.CLI, err = exec.LookPath("redis-cli"); err != nil {
			return b, fmt.Errorf("%w: redis-cli not found on PATH; %s", ErrRedisMissing, installHint)
		}
	}
	if err != nil {
		return b, err
	}
	out, err := exec.Command(b.Path, "--version").Output()
	if err != nil {
		return b, fmt.Errorf("%w: %s --version: %v; %s", ErrRedisMissing, b.Path, err, installHint)
	}
	m := versionRE.FindSubmatch(out)
	if m == nil {
		return b, fmt.Errorf("%w: cannot read the version in %q", ErrRedisMissing, out)
	}
	b.Name = string(m[1])
	b.Major, _ = strconv.Atoi(string(m[2]))
	b.Minor, _ = strconv.Atoi(string(m[3]))
	b.Patch, _ = strconv.Atoi(string(m[4]))
	if b.Major < minMajorVersion {
		return b, fmt.Errorf("%w: %s is %s %s, sharded Pub/Sub needs 7.0+; %s",
			ErrRedisMissing, b.Path, b.Name, b.Version(), installHint)
	}
	return b, nil
}

// binaryIn returns the absolute path of the executable name in dir, the
// directory ServerDirEnv named.
func binaryIn(dir, name string) (string, error) {
	path, err := filepath.Abs(filepath.Join(dir, name))
	if err != nil {
		return "", fmt.Errorf("%w: %s=%q: %v", ErrRedisMissing, ServerDirEnv, dir, err)
	}
	fi, err := os.Stat(path)
	if err == nil && (fi.IsDir() || fi.Mode()&0o111 == 0) {
		err = errors.New("not an executable file")
	}
	if err != nil {
		return "", fmt.Errorf("%w: %s=%q names no usable %s (%v); unset it to use PATH", ErrRedisMissing, ServerDirEnv, dir, name, err)
	}
	return path, nil
}
