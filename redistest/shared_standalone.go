package redistest

import (
	"context"
	"fmt"
	"os"
	"sync"
)

// StartSharedStandalone is StartStandalone for code without a testing.TB:
// TestMain, benchmarks' setup, and the demo program. Call stop when done;
// it kills the server and removes its directory, and is idempotent.
// Progress and failures are logged to stderr.
func StartSharedStandalone(opts ...Option) (s *Server, stop func(), err error) {
	if err := findBinaries(); err != nil {
		return nil, nil, err
	}
	root, err := os.MkdirTemp("", "redistest-standalone-")
	if err != nil {
		return nil, nil, fmt.Errorf("redistest: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	s, err = startProcess(ctx, sharedEnv(root), root, false, buildOptions(opts))
	if err != nil {
		_ = os.RemoveAll(root)
		return nil, nil, fmt.Errorf("redistest: start standalone redis: %w", err)
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			s.close()
			_ = os.RemoveAll(root)
		})
	}
	return s, stop, nil
}
