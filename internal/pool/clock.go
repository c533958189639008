package pool

import "time"

// workerClockRebase is how long a worker's clock runs on one wall-clock
// reading: a step of the wall clock (an operator, NTP stepping rather than
// slewing) shows in lags within this much. Slewing needs no rebase: it
// adjusts the monotonic clock the same way.
const workerClockRebase = time.Second

// workerClock reads the time for a worker's measurements at about half
// the cost of time.Now: time.Since on a Time that carries a monotonic
// reading reads only the monotonic clock, and the wall time a lag needs is
// derived from a base that holds both. Readings are durations since the
// base; a rebase starts a new base, so readings taken before it must not be
// compared with readings after it.
type workerClock struct {
	base     time.Time
	baseWall int64 // base.UnixNano()
}

// rebase re-reads the wall clock and returns the reading for now (0).
func (c *workerClock) rebase() time.Duration {
	c.base = time.Now()
	c.baseWall = c.base.UnixNano()
	return 0
}

// read returns the time since the base, rebasing first once the base is
// workerClockRebase old (or was never set).
func (c *workerClock) read() time.Duration {
	if c.base.IsZero() {
		return c.rebase()
	}
	if d := time.Since(c.base); d < workerClockRebase {
		return d
	}
	return c.rebase()
}

// since returns the time since the base without rebasing, for the end of
// an interval whose start was read from the same base.
func (c *workerClock) since() time.Duration { return time.Since(c.base) }

// lag returns how long before the reading now the wall-clock time at was.
func (c *workerClock) lag(now time.Duration, at time.Time) time.Duration {
	return time.Duration(c.baseWall + int64(now) - at.UnixNano())
}
