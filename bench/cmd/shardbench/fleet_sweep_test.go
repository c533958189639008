package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestProbeRoundCountsEachProbeOnceFromItsStart: a message published
// before the round began proves nothing (the warm-up's, arriving after
// the kill); each probe counts once however often it delivers; the round
// records when its last probe delivered, and only then.
func TestProbeRoundCountsEachProbeOnceFromItsStart(t *testing.T) {
	start := time.Now()
	r := newProbeRound([]map[string]int{{"a": 0, "b": 1}, {"c": 0}}, start)
	assert.EqualValues(t, 3, r.remaining.Load())

	r.deliver(0, 0, start.Add(-time.Millisecond))
	assert.EqualValues(t, 3, r.remaining.Load(), "a message from before the round counted")
	r.deliver(0, 0, start)
	r.deliver(0, 0, start.Add(time.Millisecond))
	assert.EqualValues(t, 2, r.remaining.Load(), "a probe counted twice")
	r.deliver(1, 0, start)
	assert.Zero(t, r.last.Load(), "last set before every probe delivered")
	r.deliver(0, 1, start)
	assert.Zero(t, r.remaining.Load())
	assert.GreaterOrEqual(t, r.last.Load(), start.UnixNano(), "the last delivery's time")
}
