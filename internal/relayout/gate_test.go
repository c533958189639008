package relayout

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestGatePreemptsWaitingCall: a call that waits with no deadline (as a
// Subscribe waits for an instance that is down) does not keep a re-layout
// step out: after PreemptAfter its ctx is cut short, and once the step is
// over the call runs again and returns what that run returns.
func TestGatePreemptsWaitingCall(t *testing.T) {
	var g Gate
	closing := make(chan struct{})
	var runs atomic.Int32
	again := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- g.run(context.Background(), closing, func(ctx context.Context) error {
			if runs.Add(1) == 1 {
				<-ctx.Done() // the instance never comes back
				return ctx.Err()
			}
			<-again
			return nil
		})
	}()
	require.Eventually(t, func() bool { return runs.Load() == 1 }, 5*time.Second, time.Millisecond)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	require.NoError(t, g.Lock(ctx, closing), "the step takes the gate from a call that waits")
	assert.GreaterOrEqual(t, time.Since(start), PreemptAfter, "the call had PreemptAfter to finish")
	select {
	case err := <-done:
		t.Fatalf("a preempted call returned %v: it should run again after the step", err)
	case <-time.After(50 * time.Millisecond):
	}
	assert.Equal(t, int32(1), runs.Load(), "no new run while the step holds the gate")
	g.Unlock()
	require.Eventually(t, func() bool { return runs.Load() == 2 }, 5*time.Second, time.Millisecond, "the call runs again after the step")
	close(again)
	select {
	case err := <-done:
		assert.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("the second run's result never came back")
	}
}

// TestGateLetsQuickCallsFinish: a call that ends within PreemptAfter is
// not cut short, and its own ctx's end is its answer, not a new run.
func TestGateLetsQuickCallsFinish(t *testing.T) {
	var g Gate
	closing := make(chan struct{})
	entered := make(chan struct{})
	release := make(chan struct{})
	done := make(chan error, 1)
	var cut atomic.Bool
	go func() {
		done <- g.run(context.Background(), closing, func(ctx context.Context) error {
			close(entered)
			select {
			case <-release:
			case <-ctx.Done():
				cut.Store(true)
			}
			return nil
		})
	}()
	<-entered
	time.AfterFunc(10*time.Millisecond, func() { close(release) })
	require.NoError(t, g.Lock(context.Background(), closing))
	g.Unlock()
	require.NoError(t, <-done)
	assert.False(t, cut.Load(), "a call that finished in time was cut short")

	// The caller's own deadline ends the call; it is not run again.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	runs := 0
	err := g.run(ctx, closing, func(ctx context.Context) error {
		runs++
		<-ctx.Done()
		return ctx.Err()
	})
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Equal(t, 1, runs)
}

// TestGateLockHonoursCtxAndClose: a step that cannot get the gate gives
// up with its ctx, or with ErrClosed when the broker closes, and leaves
// the gate open.
func TestGateLockHonoursCtxAndClose(t *testing.T) {
	var g Gate
	closing := make(chan struct{})
	require.NoError(t, g.Lock(context.Background(), closing))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	assert.ErrorIs(t, g.Lock(ctx, closing), context.DeadlineExceeded, "held by another step")
	g.Unlock()
	close(closing)
	require.NoError(t, g.Lock(context.Background(), closing), "a free gate is taken even while closing")
	g.Unlock()
	_, r, err := g.enter(context.Background(), closing)
	require.NoError(t, err)
	defer g.exit(r)
	assert.Error(t, g.Lock(context.Background(), closing), "a closing broker's step does not wait for calls")
}

// TestGatePreemptedCallKeepsCallersDeadline: a call cut short by a step
// whose undo outlasts the caller's deadline (the engine's undo is bounded
// by CommandTimeout, not by ctx) must report the caller's
// DeadlineExceeded, not a context.Canceled the caller never caused.
func TestGatePreemptedCallKeepsCallersDeadline(t *testing.T) {
	var g Gate
	closing := make(chan struct{})
	ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
	defer cancel()
	entered := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- g.run(ctx, closing, func(inner context.Context) error {
			close(entered)
			<-inner.Done() // waits on a dead instance until cut short
			<-ctx.Done()   // the undo outlasts the caller's deadline
			return fmt.Errorf("shardcast: subscribe: shard x: %w", inner.Err())
		})
	}()
	<-entered
	require.NoError(t, g.Lock(context.Background(), closing))
	err := <-done
	g.Unlock()
	assert.ErrorIs(t, err, context.DeadlineExceeded, "got %v", err)
}
