package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// runAsMainEnv, set to 1, makes the test binary run main instead of the
// tests: TestProcessExit runs the command as a process that way.
const runAsMainEnv = "SHARDCAST_TEST_RUN_MAIN"

// TestMain fails the package if a command leaves a goroutine behind.
func TestMain(m *testing.M) {
	if os.Getenv(runAsMainEnv) == "1" {
		main()
		return
	}
	goleak.VerifyTestMain(m)
}

// syncBuffer is a bytes.Buffer safe for a command writing in one goroutine
// while the test reads in another.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// testCtx returns a context bounded by d and cancelled when the test ends.
func testCtx(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// result is what one run of the command wrote and returned.
type result struct {
	out, err string
	runErr   error
}

// runCmd runs the command in-process with stdin and an environment of
// env (key, value pairs).
func runCmd(ctx context.Context, stdin string, env map[string]string, args ...string) result {
	var out, errOut syncBuffer
	err := run(ctx, args, stdio{in: strings.NewReader(stdin), out: &out, err: &errOut, getenv: func(k string) string { return env[k] }})
	return result{out: out.String(), err: errOut.String(), runErr: err}
}

// runCLI runs the command line as the process would and returns its exit
// status, stdout and stderr.
func runCLI(ctx context.Context, args ...string) (code int, out, errOut string) {
	var o, e syncBuffer
	code = cli(ctx, args, stdio{in: strings.NewReader(""), out: &o, err: &e, getenv: func(string) string { return "" }})
	return code, o.String(), e.String()
}

// mustRun runs the command and fails the test if it returns an error.
func mustRun(t *testing.T, ctx context.Context, args ...string) string {
	t.Helper()
	r := runCmd(ctx, "", nil, args...)
	require.NoError(t, r.runErr, "shardcast %s\nstderr: %s", strings.Join(args, " "), r.err)
	return r.out
}

// waitFor polls cond until it holds or ctx ends.
func waitFor(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		case <-tick.C:
		}
	}
}
