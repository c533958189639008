package pubconn

import (
	"bytes"
	"context"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardcast/shardcast/internal/subconn"
	"github.com/shardcast/shardcast/redistest"
)

// TestStallReported: a command unanswered for longer than Stall makes the
// watchdog call the hook, once per stalled command, while the wire stays up (Reply
// is far off); the command completes once the server runs again, and a
// second freeze is a second stall.
func TestStallReported(t *testing.T) {
	s := redistest.StartStandalone(t)
	var stalls atomic.Int32
	p := New(subconn.Dialer{Addr: s.Addr()}, Timeouts{Reply: time.Minute, Stall: 100 * time.Millisecond})
	p.SetOnStall(func() { stalls.Add(1) })
	defer p.Close()
	ctx := context.Background()
	require.NoError(t, p.Ping(ctx))

	for round := int32(1); round <= 2; round++ {
		require.NoError(t, s.Pause())
		// SIGSTOP is delivered asynchronously: the server could still
		// answer the publish below if it was not stopped yet.
		require.Eventually(t, func() bool { return processStopped(s.PID()) }, 10*time.Second, time.Millisecond)
		done := make(chan error, 1)
		go func() { done <- p.Publish(ctx, "ch", []byte("x"), true, time.Now()) }()
		require.Eventually(t, func() bool { return stalls.Load() == round }, 10*time.Second, 5*time.Millisecond)
		time.Sleep(300 * time.Millisecond) // three more Stall periods: still one report
		assert.Equal(t, round, stalls.Load(), "one report per stall")
		require.NoError(t, s.Resume())
		require.NoError(t, <-done, "the wire stayed up through the stall")
	}
	// Busy but answering: no report.
	for range 100 {
		require.NoError(t, p.Publish(ctx, "ch", []byte("y"), true, time.Now()))
	}
	assert.Equal(t, int32(2), stalls.Load())
}

// processStopped reports whether the process pid is in the stopped state
// (a T in /proc/pid/stat).
func processStopped(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses.
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && b[i+2] == 'T'
}
