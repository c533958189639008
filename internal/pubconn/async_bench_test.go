package pubconn

import (
	"context"
	"testing"
	"time"

	"github.com/shardcast/shardcast/internal/subconn"
	"github.com/shardcast/shardcast/redistest"
)

// BenchmarkPublishAsync measures enveloped 256-byte PublishAsync calls
// to one local Redis with no subscriber, from one caller that keeps up to
// 16 in flight (redis-benchmark -P 16's depth) with one reusable done.
// allocs/op is the steady path's allocations per call.
func BenchmarkPublishAsync(b *testing.B) {
	s := redistest.StartStandalone(b)
	p := newPub(b, subconn.Dialer{Addr: s.Addr()}, 5*time.Second)
	ctx := context.Background()
	if err := p.Ping(ctx); err != nil {
		b.Fatal(err)
	}
	payload := make([]byte, 256)
	window := make(chan struct{}, 16)
	done := func(err error) {
		if err != nil {
			b.Error(err)
		}
		<-window
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		window <- struct{}{}
		if err := p.PublishAsync(ctx, "bench", payload, false, time.Now(), done); err != nil {
			b.Fatal(err)
		}
	}
	for range cap(window) {
		window <- struct{}{}
	}
}
