package redistest

import (
	"fmt"
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

func TestLookupBinariesNamesTheInstallCommand(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := lookupBinaries()
	require.ErrorIs(t, err, ErrRedisMissing)
	assert.Contains(t, err.Error(), "redis-server not found")
	assert.Contains(t, err.Error(), "apt-get install -y redis-server redis-tools")
}

func TestLookupBinariesFindsRedis7(t *testing.T) {
	server, err := lookupBinaries()
	require.NoError(t, err, "this machine must have Redis 7+ installed")
	assert.NotEmpty(t, server)
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
