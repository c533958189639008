package events

import (
	"bytes"
	"errors"
	"github.com/shardcast/shardcast"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// emitterTestLog is a goroutine-safe log sink for Emitter tests.
type emitterTestLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *emitterTestLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *emitterTestLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func newEmitterTestLogger(level slog.Level) (*slog.Logger, *emitterTestLog) {
	sink := &emitterTestLog{}
	return slog.New(slog.NewTextHandler(sink, &slog.HandlerOptions{Level: level})), sink
}

func TestEmitterDeliversInOrderAndCloseFlushes(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	const n = 5000
	var got []uint64 // only touched by the emitter goroutine until Close returns
	e := NewEmitter(func(ev shardcast.Event) { got = append(got, ev.Count) }, nil)
	for i := range n {
		e.Emit(shardcast.Event{Kind: shardcast.EventDropped, Count: uint64(i)})
	}
	e.Close()

	require.Len(t, got, n, "Close must deliver everything queued before it")
	for i, c := range got {
		require.Equal(t, uint64(i), c, "events must arrive in emit order")
	}
}

func TestEmitterEmitNeverBlocksOnSlowCallback(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	gate := make(chan struct{})
	entered := make(chan struct{}, 1)
	var delivered atomic.Int64
	e := NewEmitter(func(shardcast.Event) {
		select {
		case entered <- struct{}{}:
		default:
		}
		<-gate
		delivered.Add(1)
	}, nil)

	e.Emit(shardcast.Event{Kind: shardcast.EventError})
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("callback never started")
	}

	// The callback is now stuck; a read loop emitting must still go on.
	const n = 10000
	emitted := make(chan struct{})
	go func() {
		defer close(emitted)
		for range n {
			e.Emit(shardcast.Event{Kind: shardcast.EventDropped})
		}
	}()
	select {
	case <-emitted:
	case <-time.After(10 * time.Second):
		t.Fatal("Emit blocked behind a stuck callback")
	}

	close(gate)
	e.Close()
	assert.Equal(t, int64(n+1), delivered.Load(), "no event may be lost")
}

func TestEmitterConcurrentEmittersLoseNothing(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	const producers, perProducer = 8, 2000
	var delivered atomic.Int64
	e := NewEmitter(func(shardcast.Event) { delivered.Add(1) }, nil)
	var wg sync.WaitGroup
	for range producers {
		wg.Go(func() {
			for range perProducer {
				e.Emit(shardcast.Event{Kind: shardcast.EventDropped})
			}
		})
	}
	wg.Wait()
	e.Close()
	assert.Equal(t, int64(producers*perProducer), delivered.Load())
}

func TestEmitterAfterCloseDropsAndCloseIsIdempotent(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	var delivered atomic.Int64
	e := NewEmitter(func(shardcast.Event) { delivered.Add(1) }, nil)
	e.Emit(shardcast.Event{Kind: shardcast.EventRestored})

	var wg sync.WaitGroup
	for range 4 {
		wg.Go(e.Close)
	}
	wg.Wait()
	e.Close()
	require.Equal(t, int64(1), delivered.Load())

	e.Emit(shardcast.Event{Kind: shardcast.EventRestored}) // must neither panic nor deliver
	e.Close()
	assert.Equal(t, int64(1), delivered.Load())
}

func TestEmitterRecoversPanickingCallback(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	logger, sink := newEmitterTestLogger(slog.LevelError)
	var got []shardcast.EventKind
	e := NewEmitter(func(ev shardcast.Event) {
		if ev.Kind == shardcast.EventInterrupted {
			panic("app bug")
		}
		got = append(got, ev.Kind)
	}, logger)
	e.Emit(shardcast.Event{Kind: shardcast.EventRestored})
	e.Emit(shardcast.Event{Kind: shardcast.EventInterrupted})
	e.Emit(shardcast.Event{Kind: shardcast.EventTopologyChanged})
	e.Close()

	assert.Equal(t, []shardcast.EventKind{shardcast.EventRestored, shardcast.EventTopologyChanged}, got,
		"the events after a panicking one must still be delivered")
	logged := sink.String()
	assert.Contains(t, logged, "OnEvent panicked")
	assert.Contains(t, logged, "app bug")
	assert.Contains(t, logged, "event=interrupted")
	assert.Contains(t, logged, "level=ERROR")
}

func TestEmitterNilCallbackOnlyLogs(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	logger, sink := newEmitterTestLogger(slog.LevelDebug)
	e := NewEmitter(nil, logger)
	e.Emit(shardcast.Event{Kind: shardcast.EventDropped, Count: 7})
	e.Emit(shardcast.Event{Kind: shardcast.EventError, Err: errors.New("reconnect failed")})
	e.Close()
	e.Close()
	e.Emit(shardcast.Event{Kind: shardcast.EventDropped}) // after Close: no panic

	logged := sink.String()
	assert.Contains(t, logged, `level=WARN msg="shardcast: messages dropped: a worker queue was full (the Handler is slower than the traffic)" kind=dropped count=7`,
		"a loss is logged at warn level")
	assert.Contains(t, logged, `level=WARN msg="shardcast: background error; the broker retries" kind=error err="reconnect failed"`)
}

func TestEmitterLogLevels(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	logger, sink := newEmitterTestLogger(slog.LevelWarn)
	var delivered atomic.Int64
	e := NewEmitter(func(shardcast.Event) { delivered.Add(1) }, logger)
	since := time.Now()
	e.Emit(shardcast.Event{Kind: shardcast.EventRestored, Shard: "a:1", Since: since, Until: since.Add(time.Second)})
	e.Emit(shardcast.Event{Kind: shardcast.EventInterrupted, Shard: "a:1", Partitions: []int{4, 3, 5, 9}, Channels: []string{"x"}, Since: since,
		Err: errors.New("subscribe connection closed by the server: EOF")})
	e.Emit(shardcast.Event{Kind: shardcast.EventRelayout, Phase: shardcast.PhaseSwitch})
	e.Emit(shardcast.Event{Kind: shardcast.EventRelayout, Phase: shardcast.PhaseBarrierTimeout, Err: shardcast.ErrRelayoutOrder})
	e.Close()
	assert.Equal(t, int64(4), delivered.Load())
	logged := sink.String()
	assert.NotContains(t, logged, "kind=restored", "info-level event logs are filtered at warn")
	assert.NotContains(t, logged, "phase="+shardcast.PhaseSwitch, "a re-layout step without an error is info")
	assert.Contains(t, logged, "phase="+shardcast.PhaseBarrierTimeout, "one that could not keep order is a warn")
	assert.Contains(t, logged, `msg="shardcast: subscriptions interrupted; their messages may be lost until they are restored" kind=interrupted node=a:1 partitions=3-5,9 channels=1 since=`)
	assert.Contains(t, logged, `err="subscribe connection closed by the server: EOF"`)
}

// blockingWriter holds every Write until release is closed.
type blockingWriter struct {
	release chan struct{}
	lines   atomic.Int64
}

func (w *blockingWriter) Write(p []byte) (int, error) {
	<-w.release
	w.lines.Add(1)
	return len(p), nil
}

// TestEmitterLogNeverBlocksEmit: a log writer that does not return (a
// full pipe) holds up neither Emit nor, once it returns, loses a line.
func TestEmitterLogNeverBlocksEmit(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	w := &blockingWriter{release: make(chan struct{})}
	e := NewEmitter(nil, slog.New(slog.NewTextHandler(w, nil)))
	const n = 1000
	emitted := make(chan struct{})
	go func() {
		defer close(emitted)
		for range n {
			e.Emit(shardcast.Event{Kind: shardcast.EventInterrupted, Shard: "a:1"})
		}
		e.Emit(shardcast.Event{Kind: shardcast.EventRestored}) // info: still logged by default
	}()
	select {
	case <-emitted:
	case <-time.After(10 * time.Second):
		t.Fatal("Emit waited for the log writer")
	}
	close(w.release)
	e.Close()
	assert.Equal(t, int64(n+1), w.lines.Load(), "every event logged once")

	quiet := NewEmitter(nil, slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelError})))
	quiet.Emit(shardcast.Event{Kind: shardcast.EventInterrupted})
	quiet.Close()
	assert.Equal(t, int64(n+1), w.lines.Load(), "a level the logger filters is not queued or written")
}
