package sharded

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestStepDoesNotDropBusyWire: a re-layout step taking the gate while a
// large Subscribe is still writing its pipeline to a busy (briefly paused,
// well under HealthTimeout) instance must not cut the write: that closes
// the instance's subscribe connection, and every channel on it is
// interrupted.
func TestStepDoesNotDropBusyWire(t *testing.T) {
	servers := startServers(t, 1)
	rec := newRecorder()
	var evs events
	// Health and write limits far above the pause: only the step could
	// drop the connection.
	conn := shardcast.ConnOptions{HealthTimeout: 20 * time.Second, WriteTimeout: 20 * time.Second, ReplyTimeout: 20 * time.Second}
	b := newBroker(t, Config{Addrs: addrs(servers...), Conn: conn, Options: shardcast.Options{Handler: rec.handle, OnEvent: evs.Add}})
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	keep := channelNames("keep-", 20)
	require.NoError(t, b.Subscribe(ctx, keep...))

	// ~8 MB of SUBSCRIBE: more than the socket buffers hold while the
	// server does not read.
	pad := strings.Repeat("x", 120)
	big := make([]string, 60000)
	for i := range big {
		big[i] = fmt.Sprintf("big-%s-%d", pad, i)
	}
	require.NoError(t, servers[0].Pause())
	var resumed atomic.Bool
	t.Cleanup(func() {
		if !resumed.Load() {
			_ = servers[0].Resume()
		}
	})
	done := make(chan error, 1)
	go func() { done <- b.Subscribe(context.Background(), big...) }()
	time.Sleep(300 * time.Millisecond) // the write is blocked now
	time.AfterFunc(time.Second, func() { resumed.Store(true); _ = servers[0].Resume() })

	require.NoError(t, b.gate.Lock(ctx, b.core.Closing())) // a step
	b.gate.Unlock()
	require.NoError(t, <-done)
	assert.Empty(t, evs.Of(shardcast.EventInterrupted), "a re-layout step dropped a healthy subscribe connection")
}

// TestPreemptedSubscribeReportsCallersDeadline: a Subscribe cut short by a
// step, whose undo on a live but slow instance outlasts the caller's
// deadline, reports that deadline (DeadlineExceeded), as it did before
// preemption, not a context.Canceled the caller never caused.
func TestPreemptedSubscribeReportsCallersDeadline(t *testing.T) {
	servers := startServers(t, 2)
	b := newBroker(t, Config{Addrs: addrs(servers...), Options: shardcast.Options{Handler: newRecorder().handle}})
	chans := channelNames("dl-", 40)
	onA, onB := onShard(b, chans, 0), onShard(b, chans, 1)
	require.NotEmpty(t, onA)
	require.NotEmpty(t, onB)
	require.NoError(t, servers[1].Kill())
	ctx, cancel := context.WithTimeout(context.Background(), 1200*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- b.Subscribe(ctx, chans...) }()
	waitFor(t, "A's channels subscribed", func() bool { return b.core.Paths[0].WantedCount() == len(onA) })
	require.NoError(t, servers[0].Pause()) // the undo on A waits for it
	time.AfterFunc(1800*time.Millisecond, func() { _ = servers[0].Resume() })
	lctx, lcancel := context.WithTimeout(context.Background(), waitTimeout)
	defer lcancel()
	require.NoError(t, b.gate.Lock(lctx, b.core.Closing()))
	b.gate.Unlock()
	err := <-done
	assert.ErrorIs(t, err, context.DeadlineExceeded, "got %v", err)
}
