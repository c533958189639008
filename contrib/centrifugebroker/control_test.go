package centrifugebroker

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/centrifugal/centrifuge"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/shardcast/shardcast/redistest"
	"github.com/shardcast/shardcast/sharded"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestControlsInOrderAndOffTheCaller(t *testing.T) {
	release := make(chan struct{})
	got := make(chan byte, 10)
	c := startControls(func(cmd []byte) {
		if cmd[0] == 0 {
			<-release // a command that blocks, as a server-side subscribe may
		}
		got <- cmd[0]
	}, slog.New(slog.DiscardHandler))
	// The caller (the engine's worker) does not wait for a blocked command.
	done := make(chan struct{})
	go func() {
		for i := range byte(5) {
			c.add([]byte{i})
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("add waited for a blocked command")
	}
	close(release)
	for i := range byte(5) {
		require.Equal(t, i, <-got)
	}
	c.close()
	c.add([]byte{9}) // after close: dropped, does not block
	require.Empty(t, got)
}

// TestControlsDropWhenFull: a full queue drops and counts the command
// instead of making the caller (a read loop) wait for room.
func TestControlsDropWhenFull(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	var ran sync.WaitGroup
	ran.Add(1 + controlQueueSize)
	c := startControls(func(cmd []byte) {
		if cmd[0] == 1 {
			close(entered)
			<-release
		}
		ran.Done()
	}, slog.New(slog.DiscardHandler))
	c.add([]byte{1})
	<-entered // the goroutine holds the first; the queue is empty
	for range controlQueueSize + 5 {
		c.add([]byte{0})
	}
	assert.Equal(t, uint64(5), c.dropped.Load())
	close(release)
	ran.Wait() // every queued command runs
	c.close()
}

// controlFunc is a ControlEventHandler calling fn.
type controlFunc func([]byte)

func (f controlFunc) HandleControl(d []byte) error { f(d); return nil }

// TestControlBurstDoesNotBlockSubscribe: while the control goroutine runs
// a command that subscribes (as a server-side subscribe does) and waits
// for the confirmation on the subscribe connection, a burst of control
// messages larger than the queue arrives on that connection before the
// confirmation. The read loop, which with InlineHandling delivers them
// itself, drops the overflow instead of waiting for room the blocked
// command would never make: the Subscribe is confirmed.
func TestControlBurstDoesNotBlockSubscribe(t *testing.T) {
	s := redistest.StartStandalone(t)
	node, err := centrifuge.New(centrifuge.Config{LogLevel: centrifuge.LogLevelNone,
		Metrics: centrifuge.MetricsConfig{RegistererGatherer: prometheus.NewRegistry()}})
	require.NoError(t, err)
	cfg := Config{Sharded: &sharded.Config{Addrs: []string{s.Addr()}}, CallTimeout: 20 * time.Second, Logger: slog.New(slog.DiscardHandler)}
	b, err := New(node, cfg)
	require.NoError(t, err)
	defer func() { require.NoError(t, b.Close(context.Background())) }()

	published := make(chan struct{})
	subscribed := make(chan error, 1)
	var once sync.Once
	require.NoError(t, b.RegisterControlEventHandler(controlFunc(func([]byte) {
		once.Do(func() {
			<-published // the whole burst is on the wire, ahead of the confirmation
			subscribed <- b.Subscribe("subscribed-by-a-control-command")
		})
	})))
	require.NoError(t, b.RegisterBrokerEventHandler(&recorder{pubs: map[string][]received{}}))

	pub, err := sharded.New(sharded.Config{Addrs: []string{s.Addr()}})
	require.NoError(t, err)
	defer func() { require.NoError(t, pub.Close()) }()
	burst := controlQueueSize + 100
	for i := range burst {
		require.NoError(t, pub.Publish(t.Context(), DefaultControlChannel, encodeControl("", []byte(strconv.Itoa(i)))))
	}
	close(published)
	select {
	case err := <-subscribed:
		require.NoError(t, err)
	case <-time.After(waitTimeout):
		t.Fatal("the control command's Subscribe never returned")
	}
	// The first command holds the goroutine (or, if the queue filled before
	// the goroutine took it, waits in the queue), the queue holds
	// controlQueueSize, and the rest were dropped.
	drops := b.Stats().ControlDrops
	assert.GreaterOrEqual(t, drops, uint64(burst-1-controlQueueSize))
	assert.LessOrEqual(t, drops, uint64(burst-controlQueueSize))
}
