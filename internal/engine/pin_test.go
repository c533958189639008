package engine

import (
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
)

type pinRoute struct{ inflight atomic.Int64 }

// TestPin: a call is counted under the route it loaded while that route
// is current; once a re-layout replaced it, Pin refuses and counts
// nothing, so that a re-layout waiting for the old route's count to reach
// zero never misses a call routed the old way. Many goroutines pinning
// while the route changes leave every count back at zero.
func TestPin(t *testing.T) {
	var cur atomic.Pointer[pinRoute]
	old := new(pinRoute)
	cur.Store(old)
	assert.True(t, Pin(&cur, old, &old.inflight))
	assert.Equal(t, int64(1), old.inflight.Load())

	next := new(pinRoute)
	cur.Store(next)
	assert.False(t, Pin(&cur, old, &old.inflight), "a replaced route pins nothing")
	assert.Equal(t, int64(1), old.inflight.Load(), "only the call pinned before the swap")
	old.inflight.Add(-1)

	routes := []*pinRoute{next}
	var wg sync.WaitGroup
	var refused atomic.Int64
	for range 8 {
		wg.Go(func() {
			for range 2000 {
				for {
					r := cur.Load()
					if Pin(&cur, r, &r.inflight) {
						r.inflight.Add(-1)
						break
					}
					refused.Add(1)
				}
			}
		})
	}
	for range 200 {
		r := new(pinRoute)
		routes = append(routes, r)
		cur.Store(r)
	}
	wg.Wait()
	for i, r := range routes {
		assert.Zero(t, r.inflight.Load(), "route %d", i)
	}
	t.Logf("%d pins refused by a swap", refused.Load())
}
