package engine

import "time"

// spanTotal adds up closed spans of time (outages, interruptions) and
// never reads less than it read before: a span dated from an earlier proof
// of health, or a wall clock stepped back, can make the total pause, not
// fall, so that the counters built on it stay counters. Its owner guards
// it.
type spanTotal struct {
	closed, shown time.Duration
}

// end adds a closed span of d (none when d is negative), and keeps at least
// what read showed of it while it was open.
func (s *spanTotal) end(d time.Duration) {
	s.closed = max(s.closed+max(0, d), s.shown)
}

// read returns the total with an open span of open (0: none).
func (s *spanTotal) read(open time.Duration) time.Duration {
	s.shown = max(s.shown, s.closed+max(0, open))
	return s.shown
}
