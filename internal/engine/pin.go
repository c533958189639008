package engine

import "sync/atomic"

// Pin counts a call in flight under r, the route cur held when the caller
// loaded it, for an online re-layout, which waits until the calls sent
// under a route it replaced have ended (see docs/RELAYOUT.md). It reports
// false and counts nothing when cur no longer holds r: the caller loads
// the new route and routes the call again. A call pinned ends with
// inflight.Add(-1).
func Pin[R any](cur *atomic.Pointer[R], r *R, inflight *atomic.Int64) bool {
	inflight.Add(1)
	if cur.Load() != r {
		inflight.Add(-1)
		return false
	}
	return true
}
