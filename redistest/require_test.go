package redistest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fatalRecorder is a testing.TB whose Fatal records the message instead of
// ending the test, so that RequireRedis's failures can be inspected.
type fatalRecorder struct {
	testing.TB
	fatals []string
}

func (r *fatalRecorder) Helper()                   {}
func (r *fatalRecorder) Fatal(args ...any)         { r.fatals = append(r.fatals, fmt.Sprint(args...)) }
func (r *fatalRecorder) Fatalf(f string, a ...any) { r.fatals = append(r.fatals, fmt.Sprintf(f, a...)) }

func TestLookupBuildNamesTheInstallCommand(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := lookupBuild("")
	require.ErrorIs(t, err, ErrRedisMissing)
	assert.Contains(t, err.Error(), "redis-server not found")
	assert.Contains(t, err.Error(), "apt-get install -y redis-server redis-tools")
}

func TestLookupBuildFindsRedis7(t *testing.T) {
	b, err := lookupBuild("")
	require.NoError(t, err, "this machine must have Redis 7+ installed")
	assert.NotEmpty(t, b.Path)
	assert.NotEmpty(t, b.CLI)
	assert.False(t, b.FromDir)
	assert.True(t, b.AtLeast(7, 0), "version %s", b.Version())
	assert.Contains(t, []string{"Redis", "Valkey"}, b.Name)
}

// TestLookupBuildFromDir: ServerDirEnv's directory is used as it is, its
// --version line read for the name and version, and a directory lacking
// either binary, or holding a server older than 7, fails; it never falls
// back to PATH.
func TestLookupBuildFromDir(t *testing.T) {
	fake := func(t *testing.T, version string, withCLI bool) string {
		dir := t.TempDir()
		script := "#!/bin/sh\necho '" + version + "'\n"
		require.NoError(t, os.WriteFile(filepath.Join(dir, "redis-server"), []byte(script), 0o755))
		if withCLI {
			require.NoError(t, os.WriteFile(filepath.Join(dir, "redis-cli"), []byte("#!/bin/sh\n"), 0o755))
		}
		return dir
	}
	t.Run("valkey", func(t *testing.T) {
		dir := fake(t, "Valkey server v=8.0.1 sha=00000000:1 malloc=libc bits=64 build=206613e5c2e9f2d1", true)
		b, err := lookupBuild(dir)
		require.NoError(t, err)
		assert.Equal(t, filepath.Join(dir, "redis-server"), b.Path)
		assert.Equal(t, filepath.Join(dir, "redis-cli"), b.CLI)
		assert.True(t, b.FromDir)
		assert.True(t, b.IsValkey())
		assert.Equal(t, "8.0.1", b.Version())
		assert.True(t, b.AtLeast(7, 4))
		assert.False(t, b.AtLeast(8, 1))
		assert.Contains(t, b.String(), "Valkey 8.0.1 ("+b.Path+", from "+ServerDirEnv+")")
	})
	t.Run("redis", func(t *testing.T) {
		b, err := lookupBuild(fake(t, "Redis server v=7.4.1 sha=00000000:1 malloc=libc bits=64 build=41ca1eddf69fe84d", true))
		require.NoError(t, err)
		assert.False(t, b.IsValkey())
		assert.Equal(t, [3]int{7, 4, 1}, [3]int{b.Major, b.Minor, b.Patch})
	})
	t.Run("too old", func(t *testing.T) {
		_, err := lookupBuild(fake(t, "Redis server v=6.2.14 sha=00000000:0 malloc=jemalloc-5.3.0 bits=64 build=1", true))
		require.ErrorIs(t, err, ErrRedisMissing)
		assert.Contains(t, err.Error(), "6.2.14")
	})
	t.Run("no redis-cli", func(t *testing.T) {
		_, err := lookupBuild(fake(t, "Redis server v=7.4.1 sha=0 malloc=libc bits=64 build=1", false))
		require.ErrorIs(t, err, ErrRedisMissing)
		assert.Contains(t, err.Error(), ServerDirEnv)
		assert.Contains(t, err.Error(), "redis-cli")
	})
	t.Run("missing directory", func(t *testing.T) {
		_, err := lookupBuild(filepath.Join(t.TempDir(), "nowhere"))
		require.ErrorIs(t, err, ErrRedisMissing)
		assert.Contains(t, err.Error(), "redis-server")
	})
	t.Run("not executable", func(t *testing.T) {
		dir := fake(t, "Redis server v=7.4.1 sha=0 malloc=libc bits=64 build=1", true)
		require.NoError(t, os.Chmod(filepath.Join(dir, "redis-server"), 0o644))
		_, err := lookupBuild(dir)
		require.ErrorIs(t, err, ErrRedisMissing)
		assert.Contains(t, err.Error(), "not an executable file")
	})
}

// TestBuildIsWhatRuns: the server a standalone start runs is the one Build
// reports.
func TestBuildIsWhatRuns(t *testing.T) {
	b, err := Build()
	require.NoError(t, err)
	s := StartStandalone(t)
	info, err := s.Info(context.Background(), "server")
	require.NoError(t, err)
	version := info["redis_version"]
	if b.IsValkey() {
		// Valkey reports the Redis version it is compatible with there.
		version = info["valkey_version"]
		assert.Equal(t, "valkey", info["server_name"])
	}
	assert.Equal(t, b.Version(), version)
	assert.Equal(t, b.Path, info["executable"])
}

func TestRequireRedisBackendSelection(t *testing.T) {
	t.Run("default is the process backend", func(t *testing.T) {
		t.Setenv(BackendEnv, "")
		rec := &fatalRecorder{TB: t}
		RequireRedis(rec)
		assert.Empty(t, rec.fatals)
		b, err := backendFromEnv()
		require.NoError(t, err)
		assert.Equal(t, backendProcess, b)
	})
	t.Run("unknown backend fails", func(t *testing.T) {
		t.Setenv(BackendEnv, "podman")
		rec := &fatalRecorder{TB: t}
		RequireRedis(rec)
		require.Len(t, rec.fatals, 1)
		assert.Contains(t, rec.fatals[0], `"podman"`)
	})
	t.Run("docker fails without a daemon or the build tag", func(t *testing.T) {
		// No Docker daemon exists on the machines this runs on; either the
		// binary lacks the tag or the daemon is unreachable. Both must fail
		// loudly, never fall back or skip.
		if dockerAvailable() == nil {
			t.Log("a Docker daemon is reachable here; nothing to check")
			return
		}
		t.Setenv(BackendEnv, "docker")
		rec := &fatalRecorder{TB: t}
		RequireRedis(rec)
		require.Len(t, rec.fatals, 1)
		assert.Contains(t, rec.fatals[0], BackendEnv)
	})
}
