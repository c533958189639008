// Package feed gives the engine kit the read-loop side of a
// shardcast.WorkerPool, which the root package keeps out of its public
// API: a Feeder batches the wake-ups of one read loop's messages and
// recycles their payload buffers.
package feed

import "time"

// A Feeder submits the messages of one socket read loop to a worker pool,
// waking the workers it fed at Flush instead of once per message. It is
// not safe for concurrent use; each read loop has its own.
type Feeder interface {
	// SubmitCopy queues a copy of the message (channel and payload may be
	// views of a read buffer) and reports whether it was queued (false:
	// dropped). With Options.InlineHandling it may run the Handler itself.
	SubmitCopy(channel string, payload []byte, at time.Time) bool
	// Flush wakes the workers fed since the last Flush; the read loop calls
	// it before it blocks on its socket.
	Flush()
}

// New returns a new Feeder of pool, which must be a *shardcast.WorkerPool.
// Package shardcast sets it when it is initialised, so it is never nil
// for an importer of the engine kit.
var New func(pool any) Feeder
