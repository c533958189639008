package pool

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestWorkerClock: readings grow from the base, a lag is measured against
// the wall clock, and an old base is replaced at the next read.
func TestWorkerClock(t *testing.T) {
	var c workerClock
	assert.Zero(t, c.read(), "the first read sets the base")
	before := time.Now()
	r := c.read()
	assert.GreaterOrEqual(t, r, time.Duration(0))
	assert.GreaterOrEqual(t, c.since(), r, "monotonic")

	// The lag of a time one second before a reading is at least a second
	// minus the time between that reading and before (both read after
	// the base): a causal bound, no timing assumption.
	at := before.Add(-time.Second)
	assert.GreaterOrEqual(t, c.lag(c.since(), at), time.Second)
	assert.Negative(t, c.lag(c.since(), time.Now().Add(time.Hour)), "a publisher ahead of us gives a negative lag")

	c.base = c.base.Add(-2 * workerClockRebase) // as if the base were old
	assert.Zero(t, c.read(), "an old base is replaced")
	assert.Less(t, c.since(), workerClockRebase)
}
