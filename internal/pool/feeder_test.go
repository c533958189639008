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

// TestSubmitCopy: SubmitCopy hands the handler copies, not the caller's
// memory; a reusing pool recycles the payload buffers it filled (fewer
// distinct buffers than messages, each payload intact while its handler
// runs) and shares one copy of each channel name, but never recycles a
// payload queued with Submit, which is the caller's.
func TestSubmitCopy(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	for _, reuse := range []bool{false, true} {
		t.Run("reuse="+strconv.FormatBool(reuse), func(t *testing.T) {
			const n = 2000
			var (
				mu      sync.Mutex
				wrong   int
				buffers = map[*byte]bool{}
				names   = map[*byte]bool{}
			)
			handler := func(m Message) {
				mu.Lock()
				defer mu.Unlock()
				i, err := strconv.Atoi(string(m.Payload[:bytes.IndexByte(m.Payload, ':')]))
				if err != nil || !bytes.Equal(m.Payload, feederPayload(i)) || m.Channel != feederChannel(i) {
					wrong++
				}
				buffers[unsafe.SliceData(m.Payload)] = true
				names[unsafe.StringData(m.Channel)] = true
			}
			newPool := newTestPool
			if reuse {
				newPool = newReusingTestPool
			}
			pool := newPool(4, n, handler, nil)
			defer pool.Close()
			f := pool.NewFeeder()
			readBuf := make([]byte, 0, 1024) // reused like a socket's read buffer
			for i := range n {
				readBuf = append(readBuf[:0], feederChannel(i)...)
				ch := unsafe.String(unsafe.SliceData(readBuf), len(readBuf))
				readBuf = append(readBuf, feederPayload(i)...)
				require.True(t, f.SubmitCopy(ch, readBuf[len(ch):], feederTime))
				if i%16 == 15 { // a burst read from a socket, handled before the next
					f.Flush()
					wptWaitUntil(t, "the burst", func() bool { return pool.Delivered() == uint64(i+1) })
				}
			}
			f.Flush()
			// Submit's messages are the caller's: a reusing pool must not
			// hand their payloads to SubmitCopy's next messages.
			own := [][]byte{feederPayload(n), feederPayload(n + 1)}
			require.True(t, f.Submit(Message{Channel: feederChannel(n), Payload: own[0]}))
			f.Flush()
			require.True(t, pool.Submit(Message{Channel: feederChannel(n + 1), Payload: own[1]}))
			wptWaitUntil(t, "every message", func() bool { return pool.Delivered() == n+2 })
			for i := range 200 {
				require.True(t, f.SubmitCopy(feederChannel(i), feederPayload(i), feederTime))
			}
			f.Flush()
			pool.Close()
			assert.Equal(t, feederPayload(n), own[0])
			assert.Equal(t, feederPayload(n+1), own[1])
			assert.Zero(t, wrong, "messages the handler saw wrong")
			if reuse {
				assert.Less(t, len(buffers), n/2, "payload buffers are recycled")
				assert.Len(t, names, 8+2, "one copy of each channel name (and the Submits' own)")
			} else {
				assert.Len(t, buffers, n+200+2, "every payload has memory of its own")
			}
		})
	}
}

var feederTime = time.Unix(1_700_000_000, 0)

func feederChannel(i int) string { return "ch:" + strconv.Itoa(i%8) }

func feederPayload(i int) []byte {
	return append([]byte(strconv.Itoa(i)+":"), bytes.Repeat([]byte{'x'}, 20+(i*53)%300)...)
}

// TestOneOffSubmitCopyKeepsFreeBuffers: Pool.SubmitCopy, a one-off
// feeder whose stash is thrown away, leaves the worker's recycled buffers
// to the worker instead of moving them into that stash.
func TestOneOffSubmitCopyKeepsFreeBuffers(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	p := newReusingTestPool(1, 64, func(Message) {}, nil)
	defer p.Close()
	free := func() int {
		w := &p.workers[0]
		w.mu.Lock()
		defer w.mu.Unlock()
		return len(w.free)
	}
	idle := func(handled uint64) func() bool {
		return func() bool { s, n := p.asleep(0); return s && n == 0 && p.Delivered() == handled }
	}
	f := p.NewFeeder()
	for range 16 {
		require.True(t, f.SubmitCopy("ch", []byte("payload"), time.Time{}))
	}
	f.Flush()
	require.Eventually(t, idle(16), wptDeadline, time.Millisecond)
	before := free()
	require.Positive(t, before, "the worker recycled the feeder's buffers")

	require.True(t, p.SubmitHeld("ch", []byte("one-off"), time.Time{}, time.Time{}))
	require.Eventually(t, idle(17), wptDeadline, time.Millisecond)
	assert.GreaterOrEqual(t, free(), before, "the one-off submit took the worker's free buffers")
}

// asleep reports whether worker i waits on its wake channel, and how many
// messages its queue holds.
func (p *Pool) asleep(i int) (bool, int) {
	w := &p.workers[i]
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.sleeping, w.n
}

// TestFeederWakesAtFlush: a feeder queues for a sleeping worker without
// waking it; Flush wakes it, once, and the messages are handled in order.
// A busy worker needs no wake-up, and Close hands over what a feeder
// queued without a Flush.
func TestFeederWakesAtFlush(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	got := make(chan Message, 16)
	p := newTestPool(1, 16, func(m Message) { got <- m }, nil)
	require.Eventually(t, func() bool { s, _ := p.asleep(0); return s }, wptDeadline, time.Millisecond)

	f := p.NewFeeder()
	for i := range 3 {
		require.True(t, f.Submit(Message{Channel: fmt.Sprintf("c%d", i)}))
	}
	sleeping, queued := p.asleep(0)
	assert.True(t, sleeping, "the feeder must not wake the worker before Flush")
	assert.Equal(t, 3, queued)
	assert.Len(t, f.pending, 1, "one pending wake-up per worker, not per message")

	f.Flush()
	assert.Empty(t, f.pending)
	for i := range 3 {
		select {
		case m := <-got:
			assert.Equal(t, fmt.Sprintf("c%d", i), m.Channel)
		case <-time.After(wptDeadline):
			t.Fatalf("message %d not handled after Flush", i)
		}
	}

	// Queued without a Flush: Close still wakes the worker and drains.
	require.Eventually(t, func() bool { s, _ := p.asleep(0); return s }, wptDeadline, time.Millisecond)
	require.True(t, f.Submit(Message{Channel: "last"}))
	p.Close()
	assert.Equal(t, "last", (<-got).Channel)
	assert.Equal(t, uint64(4), p.Delivered())
	assert.False(t, f.Submit(Message{Channel: "closed"}), "a closed pool accepts nothing")
}

// TestFeederWakesAtHalfQueue: a feeder wakes a sleeping worker without
// waiting for Flush once its queue is half full, so that one read's burst
// for a hot channel is handled while it is read instead of overflowing
// the queue of an idle worker.
func TestFeederWakesAtHalfQueue(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	var handled atomic.Int32
	p := newTestPool(1, 16, func(Message) { handled.Add(1) }, nil)
	defer p.Close()
	require.Eventually(t, func() bool { s, _ := p.asleep(0); return s }, wptDeadline, time.Millisecond)
	f := p.NewFeeder()
	for range 7 {
		require.True(t, f.SubmitCopy("hot", []byte("p"), time.Time{}))
	}
	sleeping, queued := p.asleep(0)
	assert.True(t, sleeping, "below half the queue the wake-up waits for Flush")
	assert.Equal(t, 7, queued)
	require.True(t, f.SubmitCopy("hot", []byte("p"), time.Time{}))
	require.Eventually(t, func() bool { return handled.Load() == 8 }, wptDeadline, time.Millisecond,
		"the eighth message of sixteen slots woke the worker")
	f.Flush()
	assert.Zero(t, p.Dropped())
}

// TestFeederYieldsAtHalfQueue: on a process with one core, a read loop's
// burst of twice a worker's queue drops nothing: past half the queue the
// feeder gives the worker, runnable but not running, a turn. Without the
// turn the worker ran only once the burst was over, and half of it was
// dropped.
func TestFeederYieldsAtHalfQueue(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))

	var handled atomic.Int32
	p := newTestPool(1, 16, func(Message) { handled.Add(1) }, nil)
	defer p.Close()
	f := p.NewFeeder()
	for range 3 { // the burst, a worker busy with it and then asleep
		require.Eventually(t, func() bool { s, _ := p.asleep(0); return s }, wptDeadline, time.Millisecond)
		for range 32 {
			f.SubmitCopy("hot", []byte("p"), time.Time{})
		}
		f.Flush()
	}
	require.Eventually(t, func() bool { return uint64(handled.Load())+p.Dropped() == 96 }, wptDeadline, time.Millisecond)
	assert.Zero(t, p.Dropped())
}

// copySink keeps BenchmarkFeederCopy's messages from being optimised away.
var copySink Message

// BenchmarkFeederCopy measures the copy a read loop makes of every
// received message (feeder.copied, the default's one allocation), in a
// process that holds little and in one holding a 256 MiB pointer-free
// block as a server's heap would: in the second, every copy lands in
// memory the collector has not recycled yet, which is what a real heap
// costs the receive side. With -benchmem, B/op is the allocation's size
// class.
func BenchmarkFeederCopy(b *testing.B) {
	names := wptBenchChannels()
	payload := make([]byte, 256)
	p := newTestPool(1, 0, func(Message) {}, nil)
	defer p.Close()
	f := p.NewFeeder()
	for _, mib := range []int{0, 256} {
		b.Run(fmt.Sprintf("heap=%dMiB", mib), func(b *testing.B) {
			block := make([]byte, mib<<20)
			touchPages(block)
			// The pacer lets the heap grow to about twice the block
			// before it collects: go through that headroom once, so the
			// copies find it mapped as in a long-running server rather
			// than paying the kernel's first touch of each page.
			for range mib + mib/4 {
				touchPages(make([]byte, 1<<20))
			}
			runtime.GC()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				copySink = f.copied(0, names[i&1023], payload, feederTime)
				i++
			}
			runtime.KeepAlive(block)
		})
	}
}

// touchPages writes a byte of every page of b.
func touchPages(b []byte) {
	for i := 0; i < len(b); i += 4096 {
		b[i] = 1
	}
}
