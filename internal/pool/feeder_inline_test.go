package pool

import (
	"bytes"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// goid returns the calling goroutine's id, from its stack header
// ("goroutine 18 [running]:"); tests use it to tell which goroutine ran
// a handler.
func goid() uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	id, err := strconv.ParseUint(string(b[:bytes.IndexByte(b, ' ')]), 10, 64)
	if err != nil {
		panic(err)
	}
	return id
}

// newInlinePool is a pool with Config.Inline, waiting until its
// workers are asleep so that a test's first message finds them idle.
func newInlinePool(t *testing.T, workers, queueSize int, reuse bool, handler func(Message)) *Pool {
	t.Helper()
	p := New(Config{Workers: workers, QueueSize: queueSize, Handler: handler, Reuse: reuse, Inline: true})
	for i := range workers {
		require.Eventually(t, func() bool { s, _ := p.asleep(i); return s }, wptDeadline, time.Millisecond)
	}
	return p
}

// TestFeederRunsIdleWorker: with Config.Inline, SubmitCopy hands a
// message whose worker is idle to the handler itself, before it returns,
// on the feeding goroutine (in a reusing pool with the caller's payload,
// not a copy; otherwise with a copy). A message for a busy worker is
// queued, and the worker handles it after the one it is busy with, in
// order. A one-off Pool.SubmitCopy never runs the handler on its
// caller.
func TestFeederRunsIdleWorker(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	for _, reuse := range []bool{false, true} {
		t.Run("reuse="+strconv.FormatBool(reuse), func(t *testing.T) {
			type call struct {
				payload string
				g       uint64
				data    *byte
			}
			var (
				mu      sync.Mutex
				calls   []call
				gate    = make(chan struct{})
				entered = make(chan struct{})
			)
			p := newInlinePool(t, 1, 64, reuse, func(m Message) {
				mu.Lock()
				calls = append(calls, call{string(m.Payload), goid(), unsafe.SliceData(m.Payload)})
				mu.Unlock()
				if string(m.Payload) == "block" {
					close(entered)
					<-gate
				}
			})
			defer p.Close()
			me := goid()
			f := p.NewFeeder()
			last := func() call {
				mu.Lock()
				defer mu.Unlock()
				require.NotEmpty(t, calls)
				return calls[len(calls)-1]
			}

			buf := []byte("a")
			require.True(t, f.SubmitCopy("ch", buf, feederTime))
			c := last()
			assert.Equal(t, "a", c.payload, "handled before SubmitCopy returned")
			assert.Equal(t, me, c.g, "on the feeding goroutine")
			assert.Equal(t, reuse, c.data == unsafe.SliceData(buf), "the caller's payload in a reusing pool, a copy otherwise")
			assert.Equal(t, uint64(1), p.Delivered())

			// The worker busy with a one-off's message: the feeder queues.
			require.True(t, p.SubmitHeld("ch", []byte("block"), feederTime, time.Time{}))
			<-entered
			assert.NotEqual(t, me, last().g, "a one-off runs on the worker")
			require.True(t, f.SubmitCopy("ch", []byte("b"), feederTime))
			require.True(t, f.SubmitCopy("ch", []byte("c"), feederTime))
			f.Flush()
			assert.Equal(t, "block", last().payload, "b and c wait for the busy worker")
			assert.Equal(t, 2, p.QueueDepth())
			close(gate)
			wptWaitUntil(t, "b and c", func() bool { return p.Delivered() == 4 })
			mu.Lock()
			for _, c := range calls[2:] {
				assert.NotEqual(t, me, c.g, "%s runs on the worker", c.payload)
			}
			got := make([]string, len(calls))
			for i, c := range calls {
				got[i] = c.payload
			}
			mu.Unlock()
			assert.Equal(t, []string{"a", "block", "b", "c"}, got)

			// Idle again: the feeder runs the next one itself.
			require.Eventually(t, func() bool { s, _ := p.asleep(0); return s }, wptDeadline, time.Millisecond)
			require.True(t, f.SubmitCopy("ch", []byte("d"), feederTime))
			assert.Equal(t, call{"d", me, last().data}, last())
			assert.Zero(t, p.QueueDepth())
		})
	}
}

// TestFeederRunsOrderedWithOtherFeeders: several read loops feed one
// worker at once, each its own channels, with bursts of different sizes;
// they take turns running the worker's messages when it is idle, and the
// worker runs those queued while it was not. The handler never runs twice
// at once, each channel's messages arrive in order and all of them
// arrive, while stats are read concurrently (-race checks the counters
// and histograms that only the goroutine running a worker's messages
// writes).
func TestFeederRunsOrderedWithOtherFeeders(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	const (
		feeders  = 4
		channels = 3 // per feeder
		perFeed  = 3000
	)
	var (
		inside  atomic.Int32
		overlap atomic.Int32
		mu      sync.Mutex
		last    = map[string]int{}
		wrong   int
	)
	// Queues hold every message, so none is dropped however late the
	// worker gets to run.
	p := newInlinePool(t, 1, feeders*perFeed, true, func(m Message) {
		if inside.Add(1) != 1 {
			overlap.Add(1)
		}
		i, _ := strconv.Atoi(string(m.Payload))
		mu.Lock()
		if prev, ok := last[m.Channel]; ok && i != prev+1 {
			wrong++
		}
		last[m.Channel] = i
		mu.Unlock()
		inside.Add(-1)
	})

	defer p.Close()
	stop := make(chan struct{})
	statsDone := make(chan struct{})
	defer func() {
		close(stop)
		<-statsDone
	}()
	go func() {
		defer close(statsDone)
		for {
			select {
			case <-stop:
				return
			default:
			}
			_ = p.QueueDepth()
			_ = p.QueueHighWater()
			_, _ = p.Latency()
			_ = p.Delivered()
			runtime.Gosched()
		}
	}()
	var wg sync.WaitGroup
	for fi := range feeders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f := p.NewFeeder()
			for i := 0; i < perFeed; {
				burst := 1 + (i+fi)%7
				for k := 0; k < burst && i < perFeed; k++ {
					ch := fmt.Sprintf("f%d-c%d", fi, i%channels)
					f.SubmitCopy(ch, []byte(strconv.Itoa(i/channels)), feederTime)
					i++
				}
				f.Flush()
				if i%97 == 0 {
					runtime.Gosched()
				}
			}
		}()
	}
	wg.Wait()
	require.Zero(t, p.Dropped())
	wptWaitUntil(t, "every message", func() bool { return p.Delivered() == feeders*perFeed })
	assert.Zero(t, overlap.Load(), "handler calls that overlapped")
	assert.Zero(t, wrong, "messages out of order")
	assert.Len(t, last, feeders*channels)
	lag, _ := p.Latency()
	assert.Equal(t, uint64(feeders*perFeed), lag.Count, "every message's lag recorded")
}

// TestFeederRunCloseMeanwhile: Close called while a feeder runs a message
// for an idle worker waits for it; what other feeders queued for that
// worker meanwhile is then handled by the worker before Close returns,
// and nothing is lost. After Close a feeder runs nothing.
func TestFeederRunCloseMeanwhile(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	gate := make(chan struct{})
	entered := make(chan struct{})
	p := newInlinePool(t, 1, 1000, false, func(m Message) {
		if string(m.Payload) == "0" {
			close(entered)
			<-gate
		}
	})
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		f := p.NewFeeder()
		f.SubmitCopy("ch", []byte("0"), time.Time{})
		f.Flush()
	}()
	<-entered
	const n = 100
	other := p.NewFeeder()
	for i := 1; i < n; i++ {
		require.True(t, other.SubmitCopy("ch", []byte(strconv.Itoa(i)), time.Time{}), "queued behind the running message")
	}
	other.Flush()
	assert.Equal(t, n-1, p.QueueDepth(), "the worker was not woken while the feeder ran its message")
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		p.Close()
	}()
	select {
	case <-closed:
		t.Fatal("Close returned while a feeder was still running a message")
	case <-time.After(50 * time.Millisecond):
	}
	close(gate)
	<-ran
	select {
	case <-closed:
	case <-time.After(wptDeadline):
		t.Fatal("Close did not return after the feeder's message was handled")
	}
	assert.Equal(t, uint64(n), p.Delivered(), "the feeder's message and the worker's drain deliver everything")
	assert.False(t, other.SubmitCopy("ch", []byte("late"), time.Time{}), "a closed pool neither queues nor runs a message")
	assert.Equal(t, uint64(n), p.Delivered())
}

// TestFeederRunRecoversPanic: a handler that panics on a message a feeder
// runs is recovered and counted like a worker's, and the feeder goes on.
func TestFeederRunRecoversPanic(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	var got atomic.Int32
	p := newInlinePool(t, 1, 64, false, func(m Message) {
		if string(m.Payload) == "boom" {
			panic("boom")
		}
		got.Add(1)
	})
	defer p.Close()
	f := p.NewFeeder()
	for _, s := range []string{"a", "boom", "b"} {
		assert.NotPanics(t, func() { require.True(t, f.SubmitCopy("ch", []byte(s), time.Time{})) })
	}
	assert.Equal(t, int32(2), got.Load(), "the messages around the panic are handled, by the feeder")
	assert.Equal(t, uint64(1), p.Panics())
	assert.Equal(t, uint64(2), p.Delivered())
}

// TestFeederRunAllocatesNothing: in a reusing pool with Config.Inline, a
// read loop's steady stream of messages, run by the feeder itself,
// allocates nothing.
func TestFeederRunAllocatesNothing(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	p := newInlinePool(t, 1, 256, true, func(Message) {})
	defer p.Close()
	f := p.NewFeeder()
	payload := bytes.Repeat([]byte{'x'}, 200)
	burst := func() {
		for i := range 16 {
			f.SubmitCopy(feederChannel(i), payload, feederTime)
		}
		f.Flush()
	}
	for range 20 {
		burst()
	}
	assert.Zero(t, testing.AllocsPerRun(200, burst))
}

// BenchmarkFeederHandOff measures what a message costs a read loop that
// reads a few at a time, from SubmitCopy to the handler's return, with
// and without Config.Inline: a reusing pool with one worker (the
// Centrifuge adapter's on one core), bursts of 1 or 8 messages, each burst
// flushed and handled before the next is read. Without Config.Inline
// every burst wakes the worker and switches to it; with it, the feeder
// hands the messages over itself.
func BenchmarkFeederHandOff(b *testing.B) {
	names := wptBenchChannels()
	payload := make([]byte, 256)
	for _, burst := range []int{1, 8} {
		for _, inline := range []bool{false, true} {
			b.Run(fmt.Sprintf("burst=%d/inline=%v", burst, inline), func(b *testing.B) {
				p := New(Config{Workers: 1, QueueSize: 1024, Handler: func(Message) {}, Reuse: true, Inline: inline})
				defer p.Close()
				f := p.NewFeeder()
				b.ReportAllocs()
				sent := 0
				for b.Loop() {
					f.SubmitCopy(names[sent&1023], payload, feederTime)
					sent++
					if sent%burst == 0 {
						f.Flush()
						for p.Delivered() < uint64(sent) {
							runtime.Gosched()
						}
					}
				}
				f.Flush()
			})
		}
	}
}

// channelOf returns a channel name, tag-k for the least k, that p routes
// to worker i.
func channelOf(p *Pool, i int, tag string) string {
	for k := 0; ; k++ {
		if c := tag + "-" + strconv.Itoa(k); p.workerOf(c) == i {
			return c
		}
	}
}

// TestFeederFlushesBeforeRunningInline: a feeder that queued a message
// for a sleeping worker (its wake-up deferred to Flush) and then runs
// another worker's message itself wakes the first before the handler
// runs: a handler that waits for what the queued message leads to does
// not wait for the read loop's next Flush.
func TestFeederFlushesBeforeRunningInline(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	queuedDone := make(chan struct{})
	var queuedCh, inlineCh string
	waited := make(chan bool, 1)
	p := newInlinePool(t, 2, 16, false, func(m Message) {
		switch m.Channel {
		case queuedCh:
			close(queuedDone)
		case inlineCh:
			select {
			case <-queuedDone:
				waited <- true
			case <-time.After(wptDeadline):
				waited <- false
			}
		}
	})
	defer p.Close()
	queuedCh, inlineCh = channelOf(p, 0, "queued"), channelOf(p, 1, "inline")
	f := p.NewFeeder()
	require.True(t, f.Submit(Message{Channel: queuedCh}))
	require.Len(t, f.pending, 1, "worker 0's wake-up waits for Flush")
	require.True(t, f.SubmitCopy(inlineCh, []byte("x"), time.Time{}))
	assert.True(t, <-waited, "worker 0 slept with its message queued while the feeder ran worker 1's handler")
	assert.Empty(t, f.pending)
	f.Flush()
}

// TestFeederRunSurvivesGoexit: a handler that ends the feeding goroutine
// with runtime.Goexit (a test handler's FailNow) still gives the worker
// back: its next message is handled, and Close returns.
func TestFeederRunSurvivesGoexit(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	var handled atomic.Int32
	p := newInlinePool(t, 1, 16, false, func(m Message) {
		if string(m.Payload) == "exit" {
			runtime.Goexit()
		}
		handled.Add(1)
	})
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.NewFeeder().SubmitCopy("ch", []byte("exit"), time.Time{})
	}()
	<-done
	require.True(t, p.Submit(Message{Channel: "ch", Payload: []byte("next")}))
	closed := make(chan struct{})
	go func() { p.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(wptDeadline):
		sleeping, n := p.asleep(0)
		t.Fatalf("Close hangs: the worker was never given back (sleeping %v, %d queued)", sleeping, n)
	}
	assert.Equal(t, int32(1), handled.Load())
}
