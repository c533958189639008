package engine

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestPublishTime: the publish clock agrees with time.Now (wall and
// monotonic readings), never goes back between calls, and takes a new
// base once its base is publishClockRebase old.
func TestPublishTime(t *testing.T) {
	before := time.Now()
	prev := PublishTime()
	for range 1000 {
		now := PublishTime()
		assert.False(t, now.Before(prev), "went back")
		prev = now
	}
	after := time.Now()
	assert.False(t, prev.Before(before) || prev.After(after), "outside the time.Now readings around it")
	assert.InDelta(t, after.UnixNano(), prev.UnixNano(), float64(time.Second), "wall clock")

	old := time.Now().Add(-2 * publishClockRebase)
	publishBase.Store(&old)
	now := PublishTime()
	assert.Less(t, time.Since(now), publishClockRebase, "rebased, not run on the old base")
	assert.NotSame(t, &old, publishBase.Load())
}

// BenchmarkPublishTime measures a publish's stamp; compare
// BenchmarkTimeNow.
func BenchmarkPublishTime(b *testing.B) {
	var sink int64
	for b.Loop() {
		sink += PublishTime().UnixNano()
	}
	_ = sink
}

// BenchmarkTimeNow is time.Now as BenchmarkPublishTime uses the publish
// clock.
func BenchmarkTimeNow(b *testing.B) {
	var sink int64
	for b.Loop() {
		sink += time.Now().UnixNano()
	}
	_ = sink
}
