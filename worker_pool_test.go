package shardcast

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// TestWorkerPoolDefaults: zero settings take the defaults and a nil
// handler still accepts messages.
func TestWorkerPoolDefaults(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	p := NewWorkerPool(Options{QueueSize: -5})
	assert.True(t, p.Submit(Message{Channel: "a"}), "a nil handler still accepts messages")
	p.Close()
	assert.Equal(t, uint64(1), p.Delivered())
	assert.False(t, p.Submit(Message{Channel: "a"}), "a closed pool refuses")
	assert.Zero(t, p.Dropped(), "a closed pool is gone, not overloaded")
}

// TestWorkerPoolOrderDropsPanics: a pool of one's own hands each
// channel's messages over in order, counts what a full queue dropped and
// what panicked, records lags, and drains on Close.
func TestWorkerPoolOrderDropsPanics(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	gate := make(chan struct{})
	var mu sync.Mutex
	got := map[string][]string{}
	var calls atomic.Int64
	p := NewWorkerPool(Options{Workers: 2, QueueSize: 8, Handler: func(m Message) {
		if calls.Add(1) == 1 {
			<-gate
		}
		if string(m.Payload) == "panic" {
			panic("boom")
		}
		mu.Lock()
		got[m.Channel] = append(got[m.Channel], string(m.Payload))
		mu.Unlock()
	}})
	published := time.Now().Add(-time.Second)
	require.True(t, p.Submit(Message{Channel: "c", Payload: []byte("0"), PublishedAt: published}))
	require.Eventually(t, func() bool { return calls.Load() == 1 }, 20*time.Second, time.Millisecond)
	accepted := []string{"0"}
	for i := 1; i <= 20; i++ {
		if p.Submit(Message{Channel: "c", Payload: fmt.Appendf(nil, "%d", i)}) {
			accepted = append(accepted, fmt.Sprint(i))
		}
	}
	assert.Len(t, accepted, 9, "the message in the handler and a full queue of 8")
	assert.Equal(t, uint64(20-8), p.Dropped())
	assert.Equal(t, 8, p.QueueDepth())
	close(gate)
	require.True(t, p.Submit(Message{Channel: "d", Payload: []byte("panic")}))
	p.Close()

	assert.Equal(t, accepted, got["c"], "in order, every accepted message")
	assert.Equal(t, uint64(9), p.Delivered())
	assert.Equal(t, uint64(1), p.Panics())
	assert.GreaterOrEqual(t, p.QueueHighWater(), 8)
	ls := p.Latency()
	assert.EqualValues(t, 1, ls.Lag.Count, "the one message with a publish time")
	assert.GreaterOrEqual(t, ls.Lag.Quantile(1), time.Second-time.Second*32/1000)
}
