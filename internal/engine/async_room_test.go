package engine

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestAsyncRoomBoundsAndWakes: goroutines taking and giving room through
// a small limit never hold more than the limit, and none is left waiting
// with room free (a lost wake would hang the test).
func TestAsyncRoomBoundsAndWakes(t *testing.T) {
	const limit, goroutines, each = 3, 16, 2000
	var r AsyncRoom
	var held, most atomic.Int64
	closing := make(chan struct{})
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for i := range each {
				if !assert.NoError(t, r.Take(context.Background(), limit, closing)) {
					return
				}
				h := held.Add(1)
				for m := most.Load(); h > m && !most.CompareAndSwap(m, h); m = most.Load() {
				}
				if i%7 == 0 {
					runtime.Gosched() // let others find the room full
				}
				held.Add(-1)
				r.Give()
			}
		})
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(30 * time.Second):
		t.Fatal("takers still waiting: a wake was lost")
	}
	assert.LessOrEqual(t, most.Load(), int64(limit))
	assert.Zero(t, len(r.tokens), "room taken and not given back")
}
