package pubconn

import (
	"context"
	"testing"
	"time"

	"github.com/shardcast/shardcast/internal/subconn"
	"github.com/shardcast/shardcast/redistest"
)

// BenchmarkPublish measures enveloped 256-byte publishes to one local
// Redis with no subscriber: a lone caller (one round trip per publish) and
// 64 callers per core (writes shared). allocs/op is the publish side only.
func BenchmarkPublish(b *testing.B) {
	s := redistest.StartStandalone(b)
	payload := make([]byte, 256)
	ctx := context.Background()
	b.Run("serial", func(b *testing.B) {
		p := newPub(b, subconn.Dialer{Addr: s.Addr()}, 5*time.Second)
		if err := p.Ping(ctx); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			if err := p.Publish(ctx, "bench", payload, false, time.Now()); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		p := newPub(b, subconn.Dialer{Addr: s.Addr()}, 5*time.Second)
		if err := p.Ping(ctx); err != nil {
			b.Fatal(err)
		}
		b.SetParallelism(64)
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := p.Publish(ctx, "bench", payload, false, time.Now()); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}
