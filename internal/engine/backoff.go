package engine

import "time"

// Backoff returns the wait before reconnect attempt n (0-based): doubling
// from min, capped at max.
func Backoff(n int, min, max time.Duration) time.Duration {
	d := min
	for i := 0; i < n && d < max; i++ {
		d *= 2
	}
	if d > max {
		d = max
	}
	return d
}
