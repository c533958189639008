package pool

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// wptDeadline bounds every wait in these tests; it is far above what any
// condition needs, so it only fires when something is actually stuck.
const wptDeadline = 20 * time.Second

// recLosses is a pool's Losses that records what it hears.
type recLosses struct {
	mu     sync.Mutex
	drops  []string    // channels, in order
	held   []time.Time // arrived, per drop
	panics []recPanic
}

// recPanic is one panic heard, with the stack taken where Losses heard it.
type recPanic struct {
	channel string
	value   any
	stack   string
}

func (r *recLosses) Dropped(channel string, arrived time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.drops = append(r.drops, channel)
	r.held = append(r.held, arrived)
}

func (r *recLosses) Panicked(channel string, value any) {
	stack := string(debug.Stack())
	r.mu.Lock()
	defer r.mu.Unlock()
	r.panics = append(r.panics, recPanic{channel, value, stack})
}

// dropped returns the channels of the drops heard so far.
func (r *recLosses) dropped() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.drops)
}

// panicked returns the panics heard so far.
func (r *recLosses) panicked() []recPanic {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.panics)
}

// wptWaitUntil polls cond without sleeping, yielding the processor between
// checks, until it holds or the deadline passes.
func wptWaitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(wptDeadline)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		runtime.Gosched()
	}
}

// wptBlockedPool returns a one-worker pool whose handler is stuck in its
// first message until release is called, with the queue already full, so
// every further Submit drops.
func wptBlockedPool(t *testing.T, queueSize int, losses Losses) (p *Pool, release func()) {
	t.Helper()
	gate := make(chan struct{})
	entered := make(chan struct{}, 1)
	handler := func(Message) {
		select {
		case entered <- struct{}{}:
		default:
		}
		<-gate
	}
	p = New(Config{Workers: 1, QueueSize: queueSize, Handler: handler, Losses: losses})
	require.True(t, p.Submit(Message{Channel: "first"}))
	select {
	case <-entered:
	case <-time.After(wptDeadline):
		t.Fatal("handler never started")
	}
	for i := range queueSize {
		require.True(t, p.Submit(Message{Channel: fmt.Sprintf("queued-%d", i)}))
	}
	var once sync.Once
	return p, func() { once.Do(func() { close(gate) }) }
}

func TestPoolPerChannelOrderUnderConcurrency(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	const (
		producers           = 4
		channelsPerProducer = 64
		perChannel          = 200
	)
	type chanState struct {
		inFlight  atomic.Int32
		last      atomic.Uint64
		outOfSeq  atomic.Int64
		overlaps  atomic.Int64
		delivered atomic.Int64
	}
	states := map[string]*chanState{} // read-only once producers start
	names := make([][]string, producers)
	for p := range producers {
		for c := range channelsPerProducer {
			name := fmt.Sprintf("p%d-c%d", p, c)
			names[p] = append(names[p], name)
			states[name] = &chanState{}
		}
	}

	handler := func(m Message) {
		st := states[m.Channel]
		if !st.inFlight.CompareAndSwap(0, 1) {
			st.overlaps.Add(1)
		}
		seq := binary.BigEndian.Uint64(m.Payload)
		if seq != st.last.Load()+1 {
			st.outOfSeq.Add(1)
		}
		st.last.Store(seq)
		// Yield while marked in flight to give an overlapping call, if the
		// pool allowed one, every chance to show up.
		runtime.Gosched()
		st.delivered.Add(1)
		st.inFlight.Store(0)
	}
	pool := newTestPool(8, 16, handler, nil)

	var retries atomic.Uint64
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			// One producer per channel set, like one read loop per
			// connection: the pool owes order only within a producer.
			for seq := uint64(1); seq <= perChannel; seq++ {
				for _, ch := range names[p] {
					payload := binary.BigEndian.AppendUint64(nil, seq)
					for !pool.Submit(Message{Channel: ch, Payload: payload}) {
						retries.Add(1)
						runtime.Gosched()
					}
				}
			}
		})
	}
	wg.Wait()
	pool.Close()

	for name, st := range states {
		require.Zero(t, st.overlaps.Load(), "channel %s: handler calls overlapped", name)
		require.Zero(t, st.outOfSeq.Load(), "channel %s: out of order", name)
		require.Equal(t, uint64(perChannel), st.last.Load(), "channel %s: last sequence", name)
		require.Equal(t, int64(perChannel), st.delivered.Load(), "channel %s: delivered", name)
	}
	total := uint64(producers * channelsPerProducer * perChannel)
	assert.Equal(t, total, pool.Delivered())
	assert.Equal(t, retries.Load(), pool.Dropped(), "every refused Submit is a counted drop")
	t.Logf("%d messages, %d refused by a full queue and resubmitted", total, retries.Load())
}

func TestPoolSubmitNeverBlocksWhenFull(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	losses := new(recLosses)
	pool, release := wptBlockedPool(t, 4, losses)
	defer pool.Close()
	defer release()

	const n = 100000
	var accepted atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range n {
			if pool.Submit(Message{Channel: fmt.Sprintf("ch-%d", i%10)}) {
				accepted.Add(1)
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(wptDeadline):
		t.Fatal("Submit blocked on a full queue")
	}
	assert.Zero(t, accepted.Load(), "a full queue must refuse")
	assert.Equal(t, uint64(n), pool.Dropped())
	assert.Len(t, losses.dropped(), n, "Losses hears of every drop")
}

func TestPoolCloseDrainsAndWaits(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	gate := make(chan struct{})
	var handled atomic.Int64
	pool := newTestPool(2, 1<<14, func(Message) {
		<-gate
		handled.Add(1)
	}, nil)
	const n = 5
	for range n {
		require.True(t, pool.Submit(Message{Channel: "one-channel"}))
	}

	closed := make(chan struct{})
	go func() {
		pool.Close()
		close(closed)
	}()
	// Once Submit refuses, Close has started; the handler is still held by
	// the gate, so Close cannot have finished yet. Probes that get in before
	// Close starts are queued like any other message and must be drained.
	accepted := int64(n)
	wptWaitUntil(t, "Close to stop accepting", func() bool {
		if pool.Submit(Message{Channel: "one-channel"}) {
			accepted++
			return false
		}
		return true
	})
	select {
	case <-closed:
		t.Fatal("Close returned while the handler was still running")
	default:
	}

	close(gate)
	select {
	case <-closed:
	case <-time.After(wptDeadline):
		t.Fatal("Close did not return after the handler was released")
	}
	assert.Equal(t, accepted, handled.Load(), "Close drains queued messages")
	assert.Equal(t, uint64(accepted), pool.Delivered())
	assert.Zero(t, pool.Dropped(), "Submit after Close is not a drop")
}

func TestPoolSubmitAfterClose(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	losses := new(recLosses)
	pool := newTestPool(2, 2, func(Message) {}, losses)
	pool.Close()
	for range 10 {
		assert.False(t, pool.Submit(Message{Channel: "x"}))
	}
	pool.Close() // idempotent
	assert.Zero(t, pool.Dropped())
	assert.Zero(t, pool.Delivered())
	assert.Empty(t, losses.dropped(), "a closed pool is gone, not overloaded")
}

func TestPoolConcurrentClose(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	pool := newTestPool(4, 4, func(Message) {}, nil)
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			for j := range 1000 {
				pool.Submit(Message{Channel: fmt.Sprintf("c%d-%d", i, j%50)})
			}
		})
		wg.Go(pool.Close)
	}
	wg.Wait()
	assert.False(t, pool.Submit(Message{Channel: "late"}))
}

func TestPoolRecoversHandlerPanic(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	losses := new(recLosses)
	var good atomic.Int64
	pool := newTestPool(1, 16, func(m Message) {
		if m.Channel == "bad" {
			panic("boom")
		}
		good.Add(1)
	}, losses)

	require.True(t, pool.Submit(Message{Channel: "bad"}))
	for range 5 {
		require.True(t, pool.Submit(Message{Channel: "good"}))
	}
	wptWaitUntil(t, "messages after the panic", func() bool { return pool.Delivered() == 5 })
	pool.Close()

	assert.Equal(t, int64(5), good.Load(), "the worker survives the panic")
	assert.Equal(t, uint64(1), pool.Panics())
	panics := losses.panicked()
	require.Len(t, panics, 1)
	assert.Equal(t, "bad", panics[0].channel)
	assert.Equal(t, "boom", panics[0].value)
	assert.Contains(t, panics[0].stack, "pool_test.go", "Losses hears of it on the panicking stack")
}

func TestPoolSubmitDoesNotAllocate(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	const runs = 1000
	// Queues hold every run, so all of them take the accepting path even
	// if the workers never get scheduled during the measurement.
	pool := newTestPool(4, 4*runs, func(Message) {}, nil)
	defer pool.Close()
	names := make([]string, 64)
	for i := range names {
		names[i] = fmt.Sprintf("alloc-%d", i)
	}
	payload := []byte("payload")
	now := time.Now()
	i := 0
	allocs := testing.AllocsPerRun(runs, func() {
		pool.Submit(Message{Channel: names[i%len(names)], Payload: payload, PublishedAt: now})
		i++
	})
	assert.Zero(t, allocs, "Submit allocated on the accepting path")
	assert.Zero(t, pool.Dropped(), "the measurement must not have hit the drop path")
}

func wptBenchChannels() []string {
	names := make([]string, 1024)
	for i := range names {
		names[i] = fmt.Sprintf("bench-channel-%d", i)
	}
	return names
}

// BenchmarkPoolSubmit measures Submit on the accepting path: the
// clock stops every 512 submissions until the workers have caught up, so no
// queue (1024 deep) ever fills and no iteration takes the drop path.
func BenchmarkPoolSubmit(b *testing.B) {
	const window = 512
	names := wptBenchChannels()
	pool := newTestPool(0, 0, func(Message) {}, nil)
	defer pool.Close()
	payload := make([]byte, 256)
	now := time.Now()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		pool.Submit(Message{Channel: names[i&1023], Payload: payload, PublishedAt: now})
		if i%window == window-1 {
			b.StopTimer()
			for pool.Delivered() < uint64(i+1) {
				runtime.Gosched()
			}
			b.StartTimer()
		}
	}
	b.StopTimer()
	if d := pool.Dropped(); d != 0 {
		b.Fatalf("%d drops: the benchmark left the accepting path", d)
	}
}

// BenchmarkPoolSubmitParallel measures sustained hand-off through the
// pool from parallel producers (one per P, like read loops), each with its
// own channels and at most 256 messages in flight. The clock keeps running
// while a producer waits for its window to drain, so ns/op is the pool's
// cost per message end to end, not Submit alone; no queue can fill, so the
// drop path is never taken.
func BenchmarkPoolSubmitParallel(b *testing.B) {
	const (
		window       = 256
		maxProducers = 256
	)
	names := wptBenchChannels()
	type paddedCounter struct {
		n atomic.Uint64
		_ [56]byte
	}
	delivered := make([]paddedCounter, maxProducers)
	pool := newTestPool(0, 0, func(m Message) { delivered[m.Payload[0]].n.Add(1) }, nil)
	defer pool.Close()
	now := time.Now()
	var producers atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		id := producers.Add(1) - 1
		if id >= maxProducers {
			panic("too many producers for the benchmark's counters")
		}
		payload := make([]byte, 256)
		payload[0] = byte(id)
		// Disjoint channel ranges per producer, as each read loop owns its
		// connection's channels.
		base := int(id) * 64
		var sent uint64
		for pb.Next() {
			pool.Submit(Message{Channel: names[(base+int(sent%64))&1023], Payload: payload, PublishedAt: now})
			sent++
			if sent%window == 0 {
				for delivered[id].n.Load() < sent {
					runtime.Gosched()
				}
			}
		}
	})
	b.StopTimer()
	if d := pool.Dropped(); d != 0 {
		b.Fatalf("%d drops: the benchmark left the accepting path", d)
	}
}

// BenchmarkPoolSubmitFull measures the drop path: the only worker is
// stuck, its queue is full, and every Submit drops and records the loss.
func BenchmarkPoolSubmitFull(b *testing.B) {
	names := wptBenchChannels()
	gate := make(chan struct{})
	entered := make(chan struct{})
	var once sync.Once
	pool := newTestPool(1, 1, func(Message) {
		once.Do(func() { close(entered) })
		<-gate
	}, nil)
	defer pool.Close()
	defer close(gate)
	pool.Submit(Message{Channel: "held"})
	<-entered
	pool.Submit(Message{Channel: "queued"})
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if pool.Submit(Message{Channel: names[i&1023]}) {
			b.Fatal("a full queue accepted a message")
		}
	}
}

// BenchmarkPoolDeliver measures a read loop's hand-off end to end,
// with the clock running: one feeder queues bursts of 64 messages (with a
// PublishedAt, so lags are recorded) for 4 workers and flushes, and waits
// until they are handled before the next burst. ns/op is the cost per
// message of queueing, waking, taking and observing it; build with
// -tags shardcast_noobserve for the same without lag, handler time and
// hot-channel sampling.
func BenchmarkPoolDeliver(b *testing.B) {
	names := wptBenchChannels()
	pool := newTestPool(4, 0, func(Message) {}, nil)
	defer pool.Close()
	f := pool.NewFeeder()
	payload := make([]byte, 256)
	b.ReportAllocs()
	sent := 0
	for b.Loop() {
		f.Submit(Message{Channel: names[sent&1023], Payload: payload, PublishedAt: time.Now()})
		sent++
		if sent%64 == 0 {
			f.Flush()
			for pool.Delivered() < uint64(sent) {
				runtime.Gosched()
			}
		}
	}
	f.Flush()
}

// newTestPool returns a pool of workers with queues of queueSize; zero
// or less takes the library's defaults (16 workers, 1024 messages).
func newTestPool(workers, queueSize int, handler func(Message), losses Losses) *Pool {
	return New(testConfig(workers, queueSize, handler, losses))
}

// newReusingTestPool is newTestPool with Config.Reuse.
func newReusingTestPool(workers, queueSize int, handler func(Message), losses Losses) *Pool {
	cfg := testConfig(workers, queueSize, handler, losses)
	cfg.Reuse = true
	return New(cfg)
}

// testConfig is newTestPool's Config.
func testConfig(workers, queueSize int, handler func(Message), losses Losses) Config {
	if workers <= 0 {
		workers = 16
	}
	if queueSize <= 0 {
		queueSize = 1024
	}
	return Config{Workers: workers, QueueSize: queueSize, Handler: handler, Losses: losses}
}

// TestNewRefusesNoWorkers: a pool without workers or queue room is a
// programming error New names, not a division by zero at the first Submit.
func TestNewRefusesNoWorkers(t *testing.T) {
	assert.PanicsWithValue(t, "pool: New with 0 workers and queues of 8", func() { New(Config{QueueSize: 8}) })
	assert.PanicsWithValue(t, "pool: New with 2 workers and queues of 0", func() { New(Config{Workers: 2}) })
}
