package sharded

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/redistest"
)

// BenchmarkPublishDeliverAsync measures publish→deliver through one
// local instance as BenchmarkPublishDeliver does (256-byte messages over
// 64 channels, the clock stopped once the subscriber has handled or
// dropped every one), from a fixed number of publisher goroutines, issue
// 15's 8 and 128: async/N keeps up to 16 PublishAsync calls in flight per
// goroutine (redis-benchmark -P 16's depth), sync/N calls Publish, the
// baseline of the same shape. It reports delivered/s, allocs of both
// sides per message, and cpu-ns/msg, the CPU time of the whole process
// (publishers, subscriber, runtime; not Redis) per message. Run it with
// -cpu 1 for issue 15's client GOMAXPROCS 1. reads/msg and writes/msg are
// the process's socket syscalls per message.
func BenchmarkPublishDeliverAsync(b *testing.B) {
	for _, publishers := range []int{8, 128} {
		for _, async := range []bool{true, false} {
			name := "sync/"
			if async {
				name = "async/"
			}
			b.Run(name+strconv.Itoa(publishers), func(b *testing.B) {
				benchDeliverFrom(b, publishers, async)
			})
		}
	}
}

// benchDeliverFrom runs one case of BenchmarkPublishDeliverAsync.
func benchDeliverFrom(b *testing.B, publishers int, async bool) {
	s := redistest.StartStandalone(b)
	// A context that can end, as a server's request context (and
	// shardbench's) can: a call then waits on its Done as well.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sub := newBroker(b, Config{Addrs: addrs(s), Options: shardcast.Options{Handler: func(shardcast.Message) {}}})
	pub := newBroker(b, Config{Addrs: addrs(s)})
	chans := channelNames("bench:", 64)
	if err := sub.Subscribe(ctx, chans...); err != nil {
		b.Fatal(err)
	}
	payload := make([]byte, 256)
	var next atomic.Int64 // messages handed out to the goroutines
	var failed atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	cpu0, cpuOK := processCPU()
	io0 := snapshotSyscalls()
	var wg sync.WaitGroup
	for g := range publishers {
		wg.Go(func() {
			window := make(chan struct{}, 16)
			done := func(err error) {
				if err != nil {
					failed.Add(1)
				}
				<-window
			}
			for i := g; next.Add(1) <= int64(b.N); i++ {
				ch := chans[i%len(chans)]
				if !async {
					if err := pub.Publish(ctx, ch, payload); err != nil {
						failed.Add(1)
					}
					continue
				}
				window <- struct{}{}
				if err := pub.PublishAsync(ctx, ch, payload, done); err != nil {
					<-window
					failed.Add(1)
				}
			}
			for range cap(window) {
				window <- struct{}{} // the last outcomes
			}
		})
	}
	wg.Wait()
	if n := failed.Load(); n > 0 {
		b.Fatalf("%d publishes failed", n)
	}
	reportDelivered(b, sub, start, cpu0, cpuOK, io0)
}
