package engine

import (
	"sync/atomic"
	"time"
)

// publishClockRebase is how long the publish clock runs on one reading of
// the wall clock: a step of the wall clock (an operator, NTP stepping
// rather than slewing) shows in envelope stamps within this much. Slewing
// needs no rebase: it adjusts the monotonic clock the same way.
const publishClockRebase = time.Second

// publishBase is the reading of both clocks the publish clock runs on.
var publishBase atomic.Pointer[time.Time]

// PublishTime returns the time a publish's envelope is stamped with: the
// wall clock, derived from the monotonic clock since a reading of both
// (at most publishClockRebase old), at the cost of the monotonic reading
// alone, where time.Now reads both clocks; on a VM's vDSO about 30 ns
// against 50, once per message on the publish path. The Time carries a
// monotonic reading too, as time.Now's does, so that durations measured
// from it (the publish wire's reply watchdog) ignore wall-clock steps.
func PublishTime() time.Time {
	if b := publishBase.Load(); b != nil {
		if d := time.Since(*b); d >= 0 && d < publishClockRebase {
			return b.Add(d)
		}
	}
	now := time.Now()
	publishBase.Store(&now)
	return now
}
