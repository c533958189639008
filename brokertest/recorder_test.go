package brokertest

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
)

// recorder is a T that keeps what a check reports instead of failing the
// test, so that a test can assert that a check fails, and how.
type recorder struct {
	ctx    context.Context
	cancel context.CancelFunc

	mu       sync.Mutex
	errs     []string
	failed   bool
	skipped  bool
	cleanups []func()
}

var _ T = (*recorder)(nil)

// record runs fn on its own goroutine, as testing runs a test, then its
// cleanups, last registered first, and returns what fn reported.
func record(fn func(T)) *recorder {
	r := &recorder{}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer r.runCleanups()
		fn(r)
	}()
	<-done
	return r
}

// runCleanups runs each cleanup on a goroutine of its own, so that one
// that calls FailNow ends only itself.
func (r *recorder) runCleanups() {
	r.cancel()
	for {
		r.mu.Lock()
		n := len(r.cleanups)
		if n == 0 {
			r.mu.Unlock()
			return
		}
		f := r.cleanups[n-1]
		r.cleanups = r.cleanups[:n-1]
		r.mu.Unlock()
		done := make(chan struct{})
		go func() {
			defer close(done)
			f()
		}()
		<-done
	}
}

func (r *recorder) Helper() {}

func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failed = true
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// FailNow marks the check failed and ends the calling goroutine, as
// testing.T's does.
func (r *recorder) FailNow() {
	r.mu.Lock()
	r.failed = true
	r.mu.Unlock()
	runtime.Goexit()
}

func (r *recorder) Skipf(format string, args ...any) {
	r.mu.Lock()
	r.skipped = true
	r.errs = append(r.errs, "skipped: "+fmt.Sprintf(format, args...))
	r.mu.Unlock()
	runtime.Goexit()
}

func (r *recorder) Cleanup(f func()) {
	r.mu.Lock()
	r.cleanups = append(r.cleanups, f)
	r.mu.Unlock()
}

func (r *recorder) Context() context.Context { return r.ctx }

// report returns everything the check reported, one line per report.
func (r *recorder) report() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.errs, "\n")
}
