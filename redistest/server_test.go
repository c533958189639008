package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardcast/shardcast/internal/resp"
)

func testCtx(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// processGone reports whether pid no longer exists (or is a zombie nobody
// will reap, which cannot happen for our children once Wait returned).
func processGone(pid int) bool {
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

func TestStandaloneDoAndIntrospection(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 30*time.Second)
	s := StartStandalone(t)

	reply, err := s.Do(ctx, "SET", "k", "v")
	require.NoError(t, err)
	assert.Equal(t, "OK", reply)
	reply, err = s.Do(ctx, "GET", "k")
	require.NoError(t, err)
	assert.Equal(t, "v", reply)
	reply, err = s.Do(ctx, "GET", "missing")
	require.NoError(t, err)
	assert.Nil(t, reply)

	_, err = s.Do(ctx, "CLUSTER", "KEYSLOT", "k")
	_, ok := resp.IsServerError(err)
	require.True(t, ok, "a standalone server has no cluster support: %v", err)
	_, err = s.Do(ctx)
	assert.Error(t, err)

	info, err := s.Info(ctx, "server")
	require.NoError(t, err)
	assert.Equal(t, "standalone", info["redis_mode"])
	assert.Equal(t, s.Port(), atoi(t, info["tcp_port"]))
	assert.Equal(t, s.PID(), atoi(t, info["process_id"]), "PID must be the server's own process")

	conf, err := s.Do(ctx, "CONFIG", "GET", "save")
	require.NoError(t, err)
	assert.Equal(t, []any{"save", ""}, conf, "test servers must not persist")

	stats, err := s.CommandStats(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(1), stats["set"])
	assert.Equal(t, int64(2), stats["get"])
	assert.Zero(t, stats["spublish"])

	// A named connection shows up; the harness's own does not.
	sub, err := s.dial(ctx)
	require.NoError(t, err)
	defer sub.close()
	_, err = sub.do(ctx, []string{"CLIENT", "SETNAME", "watcher"}, []string{"SUBSCRIBE", "news"})
	require.NoError(t, err)
	clients, err := s.ClientList(ctx)
	require.NoError(t, err)
	require.Len(t, clients, 1)
	assert.Equal(t, "watcher", clients[0]["name"])
	assert.Equal(t, "1", clients[0]["sub"])
}

func TestStandaloneKillRestartPauseStop(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 30*time.Second)
	s := StartStandalone(t)
	port, pid := s.Port(), s.PID()
	require.NotZero(t, pid)
	_, err := s.Do(ctx, "SET", "k", "v")
	require.NoError(t, err)

	require.NoError(t, s.Kill())
	assert.True(t, processGone(pid), "SIGKILLed process must be reaped")
	assert.False(t, s.Running())
	assert.Zero(t, s.PID())
	_, err = s.Do(ctx, "PING")
	assert.Error(t, err, "a killed server must not answer")
	require.NoError(t, s.Kill(), "killing a dead server is a no-op")
	assert.ErrorIs(t, s.Pause(), ErrNotRunning)

	require.NoError(t, s.Restart(ctx))
	assert.Equal(t, port, s.Port())
	assert.NotEqual(t, pid, s.PID())
	assert.True(t, s.Running())
	reply, err := s.Do(ctx, "GET", "k")
	require.NoError(t, err)
	assert.Nil(t, reply, "nothing persists across a restart")

	require.NoError(t, s.Pause())
	assert.True(t, s.Paused())
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err = s.Do(short, "PING")
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded, "a paused server accepts but never answers")
	require.NoError(t, s.Resume())
	assert.False(t, s.Paused())
	reply, err = s.Do(ctx, "PING")
	require.NoError(t, err)
	assert.Equal(t, "PONG", reply)

	// Stop works on a paused server: it is continued to act on SIGTERM.
	require.NoError(t, s.Pause())
	pid = s.PID()
	require.NoError(t, s.Stop())
	assert.True(t, processGone(pid))
	assert.Contains(t, fileTail(s.Dir()+"/redis.log", 5), "Redis is now ready to exit", "Stop must be a clean shutdown")
	assert.ErrorIs(t, s.Resume(), ErrNotRunning)

	require.NoError(t, s.Restart(ctx), "a stopped server can be restarted")
	assert.Equal(t, port, s.Port())
}

func TestStandaloneCleanupLeavesNothing(t *testing.T) {
	t.Parallel()
	var pid, port int
	var dir string
	t.Run("owner", func(t *testing.T) {
		s := StartStandalone(t, WithArgs("--maxmemory", "10mb"))
		pid, port, dir = s.PID(), s.Port(), s.Dir()
		v, err := s.Do(testCtx(t, 10*time.Second), "CONFIG", "GET", "maxmemory")
		require.NoError(t, err)
		assert.Equal(t, []any{"maxmemory", "10485760"}, v, "WithArgs must reach the server")
	})
	assert.True(t, processGone(pid), "server must be killed and reaped by cleanup")
	_, err := os.Stat(dir)
	assert.ErrorIs(t, err, os.ErrNotExist, "temp dir must be removed")
	for _, p := range []int{port, port + busPortOffset} {
		unlock, locked, err := lockPort(p)
		require.NoError(t, err)
		assert.True(t, locked, "port %d must be released", p)
		unlock()
	}
}

func TestStartFailureIsReported(t *testing.T) {
	t.Parallel()
	rec := &logRecorder{}
	// redis-server refuses unknown directives and exits at once.
	s, err := startProcess(testCtx(t, 30*time.Second), rec.env(t), t.TempDir(), false, buildOptions([]Option{WithArgs("--no-such-directive", "1")}))
	require.Error(t, err)
	assert.Nil(t, s)
	assert.Contains(t, err.Error(), "exited before answering PING")
	assert.Len(t, logLines(rec.logs), 1, "a config error must not be retried")
}

func TestStartRetriesOnLostPort(t *testing.T) {
	t.Parallel()
	// Make the first attempts fail the way a port stolen after our probe
	// does: redis-server binds the port given last, which is occupied.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	busy := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	rec := &logRecorder{}
	_, err = startProcess(testCtx(t, 30*time.Second), rec.env(t), t.TempDir(), false, buildOptions([]Option{WithArgs("--port", busy)}))
	require.Error(t, err)
	assert.Len(t, logLines(rec.logs), startAttempts, "a lost port must be retried on new ports")
	assert.Contains(t, rec.logs[0], "Address already in use")
}

// logRecorder captures what the harness logs.
type logRecorder struct {
	mu   sync.Mutex
	logs []string
}

func (r *logRecorder) env(t *testing.T) env {
	e := tbEnv(t)
	e.logf = func(format string, args ...any) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.logs = append(r.logs, fmt.Sprintf(format, args...))
	}
	return e
}

// logLines keeps the messages that report a failed start attempt.
func logLines(logs []string) []string {
	var out []string
	for _, l := range logs {
		if strings.Contains(l, "failed to start") {
			out = append(out, l)
		}
	}
	return out
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	var n int
	for _, c := range s {
		require.True(t, c >= '0' && c <= '9', "not a number: %q", s)
		n = n*10 + int(c-'0')
	}
	return n
}

func TestSharedStandaloneOutsideATest(t *testing.T) {
	t.Parallel()
	s, stop, err := StartSharedStandalone()
	require.NoError(t, err)
	defer stop()
	reply, err := s.Do(testCtx(t, 10*time.Second), "PING")
	require.NoError(t, err)
	assert.Equal(t, "PONG", reply)
	pid, dir := s.PID(), s.Dir()
	require.NotZero(t, pid)

	stop()
	stop()
	assert.True(t, processGone(pid), "stop must kill the server")
	_, err = os.Stat(dir)
	assert.ErrorIs(t, err, os.ErrNotExist, "stop must remove the directory")
}
