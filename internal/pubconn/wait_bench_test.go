package pubconn

import (
	"context"
	"testing"
)

// BenchmarkReplyWait measures what a synchronous call pays to wait for
// its reply, apart from Redis: the caller parks on its call's done
// channel and a reader goroutine wakes it, one round trip per op, as do
// and complete hand a reply over. "select" is do's wait under a ctx that
// can end (the reply or ctx.Done), "receive" its wait under one that
// cannot, and "afterfunc" a plain receive with context.AfterFunc waking
// the caller on ctx's end instead of the select: the form not taken. Run
// with -cpu 1 to price it on the one core the throughput rows give the
// client.
func BenchmarkReplyWait(b *testing.B) {
	run := func(b *testing.B, wait func(ctx context.Context, c *call)) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		replies := make(chan *call, 1)
		go func() {
			for c := range replies {
				c.done <- struct{}{}
			}
		}()
		defer close(replies)
		b.ReportAllocs()
		for b.Loop() {
			c := calls.Get().(*call)
			replies <- c
			wait(ctx, c)
			calls.Put(c)
		}
	}
	b.Run("select", func(b *testing.B) {
		run(b, func(ctx context.Context, c *call) {
			select {
			case <-c.done:
			case <-ctx.Done():
			}
		})
	})
	b.Run("receive", func(b *testing.B) {
		run(b, func(_ context.Context, c *call) { <-c.done })
	})
	b.Run("afterfunc", func(b *testing.B) {
		run(b, func(ctx context.Context, c *call) {
			stop := context.AfterFunc(ctx, func() {
				select {
				case c.done <- struct{}{}:
				default:
				}
			})
			<-c.done
			stop()
		})
	})
}
