package sharded

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/redistest"
)

// BenchmarkPublishDeliver measures publish→deliver through one local
// instance: 64 goroutines per core publish 256-byte messages over 64
// channels, and the clock stops once the subscriber has handled (or
// dropped) every one. It reports delivered messages per second and,
// through ReportAllocs, the allocations of both sides per message, and
// cpu-ns/msg, the CPU time of the whole process (publishers, subscriber,
// runtime; not Redis) per message: issue 15's client CPU per message, less
// sensitive than ns/op to other work on a shared machine.
func BenchmarkPublishDeliver(b *testing.B) {
	benchPublishDeliver(b, shardcast.Options{})
}

// BenchmarkPublishDeliverReusePayloads is BenchmarkPublishDeliver with
// Options.ReusePayloads on the subscriber: its handler keeps nothing, so
// payload buffers are recycled and allocs/op shows what is left per
// message. Run both in one go (-bench PublishDeliver) for the ratio.
func BenchmarkPublishDeliverReusePayloads(b *testing.B) {
	benchPublishDeliver(b, shardcast.Options{ReusePayloads: true})
}

// benchPublishDeliver runs BenchmarkPublishDeliver with the subscriber
// built from opts (its Handler set here).
func benchPublishDeliver(b *testing.B, opts shardcast.Options) {
	s := redistest.StartStandalone(b)
	ctx := context.Background()
	var handled atomic.Int64
	opts.Handler = func(shardcast.Message) { handled.Add(1) }
	sub := newBroker(b, Config{Addrs: addrs(s), Options: opts})
	pub := newBroker(b, Config{Addrs: addrs(s)})
	chans := channelNames("bench:", 64)
	if err := sub.Subscribe(ctx, chans...); err != nil {
		b.Fatal(err)
	}
	payload := make([]byte, 256)
	var next atomic.Uint64
	// 64 publishers per core, as on a busy real-time server. With only a
	// few, each waits out the 100µs flush delay (longer under load: it is a
	// timer sleep) and the run measures the delay, not the engine.
	b.SetParallelism(64)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	cpu0, cpuOK := processCPU()
	io0 := snapshotSyscalls()
	b.RunParallel(func(pb *testing.PB) {
		i := next.Add(1)
		for pb.Next() {
			if err := pub.Publish(ctx, chans[i%uint64(len(chans))], payload); err != nil {
				b.Error(err)
				return
			}
			i++
		}
	})
	reportDelivered(b, sub, start, cpu0, cpuOK, io0)
}

// BenchmarkEval measures Broker.Eval of a one-key script that increments
// a counter, from 64 goroutines per core on one local instance: the
// path a history-keeping adapter (contrib/centrifugebroker) takes on
// every publish. ReportAllocs shows its allocations per call.
func BenchmarkEval(b *testing.B) {
	s := redistest.StartStandalone(b)
	ctx := context.Background()
	br := newBroker(b, Config{Addrs: addrs(s)})
	script := shardcast.NewScript(`return redis.call('INCR', KEYS[1])`)
	chans := channelNames("eval:", 64)
	var next atomic.Uint64
	b.SetParallelism(64)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		ch := chans[next.Add(1)%uint64(len(chans))]
		keys := []string{"eval-counter:" + ch}
		for pb.Next() {
			if _, err := br.Eval(ctx, ch, script, keys, "1"); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// syscallCount is processSyscalls at one moment.
type syscallCount struct {
	reads, writes uint64
	ok            bool
}

func snapshotSyscalls() syscallCount {
	r, w, ok := processSyscalls()
	return syscallCount{r, w, ok}
}

// reportDelivered waits until sub handled (or dropped) b.N messages, stops
// the clock and reports cpu-ns/msg (the process's CPU since cpu0, when
// cpuOK), delivered/s since start, dropped/op, and the process's read and
// write syscalls per message since io0 (when measured): how many messages
// share one socket read or write.
func reportDelivered(b *testing.B, sub *Broker, start time.Time, cpu0 time.Duration, cpuOK bool, io0 syscallCount) {
	want := uint64(b.N)
	deadline := time.Now().Add(waitTimeout)
	for {
		st := sub.Stats()
		if st.Received >= want && st.Delivered+st.Dropped >= want {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("after %v: received %d, delivered %d, dropped %d of %d", waitTimeout, st.Received, st.Delivered, st.Dropped, want)
		}
		time.Sleep(50 * time.Microsecond)
	}
	elapsed := time.Since(start)
	cpu1, _ := processCPU()
	b.StopTimer()
	if cpuOK {
		b.ReportMetric(float64(cpu1-cpu0)/float64(b.N), "cpu-ns/msg")
	}
	st := sub.Stats()
	b.ReportMetric(float64(st.Delivered)/elapsed.Seconds(), "delivered/s")
	b.ReportMetric(float64(st.Dropped)/float64(b.N), "dropped/op")
	if io1 := snapshotSyscalls(); io0.ok && io1.ok {
		b.ReportMetric(float64(io1.reads-io0.reads)/float64(b.N), "reads/msg")
		b.ReportMetric(float64(io1.writes-io0.writes)/float64(b.N), "writes/msg")
	}
}
