package engine

import (
	"context"
	"sync/atomic"

	"github.com/redis/rueidis"
)

// DefaultBatchThreshold is the number of Publish calls in flight at which
// publishes start to wait for MaxFlushDelay to share round trips.
const DefaultBatchThreshold = 32

// PublishRoute sends publishes through one of two rueidis clients to the
// same servers: one writes each command at once, the other waits up to its
// MaxFlushDelay so that concurrent commands share a write.
//
// rueidis delays a flush whenever more than one command waits, and on a
// busy machine a sub-millisecond sleep lasts about a millisecond: with a
// few publishers in flight every round trip would cost that sleep. So the
// route writes at once while fewer than Threshold publishes are in flight,
// and batches above it, where the sleep pays for itself. One goroutine's
// publishes are sequential, so switching clients never reorders them.
type PublishRoute struct {
	Direct    rueidis.Client
	Batched   rueidis.Client // nil: always Direct
	Threshold int64
	inflight  atomic.Int64
}

// Do sends cmd and returns its error.
func (r *PublishRoute) Do(ctx context.Context, cmd rueidis.Completed) error {
	n := r.inflight.Add(1)
	defer r.inflight.Add(-1)
	return r.pick(n).Do(ctx, cmd).Error()
}

// pick chooses the client for a publish that makes n in flight.
func (r *PublishRoute) pick(n int64) rueidis.Client {
	if r.Batched != nil && n > r.Threshold {
		return r.Batched
	}
	return r.Direct
}

// Close closes both clients.
func (r *PublishRoute) Close() {
	r.Direct.Close()
	if r.Batched != nil {
		r.Batched.Close()
	}
}
