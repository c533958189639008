package redistest

import (
	"fmt"
	"os"
	"testing"
)

// env is what the harness needs from its surroundings: somewhere to log,
// somewhere to report a failed cleanup, and fresh directories. A test
// provides it through testing.TB; TestMain, which has no TB, through
// sharedEnv.
type env struct {
	logf    func(format string, args ...any)
	errorf  func(format string, args ...any)
	tempDir func() (string, error)
}

// tbEnv adapts a test. TempDir's failure is fatal to the test anyway.
func tbEnv(tb testing.TB) env {
	return env{
		logf:    tb.Logf,
		errorf:  tb.Errorf,
		tempDir: func() (string, error) { return tb.TempDir(), nil },
	}
}

// sharedEnv logs to stderr (which `go test` shows only for a failing
// package or with -v) and makes directories under root.
func sharedEnv(root string) env {
	logf := func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
	return env{
		logf:    logf,
		errorf:  logf,
		tempDir: func() (string, error) { return os.MkdirTemp(root, "node-") },
	}
}
