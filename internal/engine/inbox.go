package engine

import (
	"time"

	"github.com/shardcast/shardcast/envelope"
	"github.com/shardcast/shardcast/internal/pool"
)

// Inbox turns wire messages into the pool's messages and hands them to the
// worker pool. It runs on socket read loops, so it never blocks.
type Inbox struct {
	Pool *pool.Pool
	Raw  bool
}

// Decode unwraps a message's envelope: it
// returns the publish time (zero in Raw mode or for a message that is not
// an envelope, counted as a bad frame and delivered as it is) and the
// body, a view of payload; ok is false for a bad frame.
func (in *Inbox) Decode(payload []byte) (at time.Time, body []byte, ok bool) {
	if in.Raw {
		return time.Time{}, payload, true
	}
	t, b, err := envelope.Decode(payload)
	if err != nil {
		return time.Time{}, payload, false
	}
	return t, b, true
}

// Submit hands a decoded message to the worker pool through f, the
// feeder of the read loop it came from, or directly when f is nil.
// channel and body may be views of a read buffer: the message gets copies,
// or, when the pool's InlineHandling hands it to the Handler at once, a
// body that is the view itself (see pool.Feeder.SubmitCopy). arrived, for a message
// that was held back (f nil, see Core.DeliverHeld), dates its drop. It
// reports whether the pool took the message (false: dropped).
func (in *Inbox) Submit(f *pool.Feeder, channel string, body []byte, at, arrived time.Time) bool {
	if f == nil { // a held message, or a link not built by NewLink (tests)
		return in.Pool.SubmitHeld(channel, body, at, arrived)
	}
	return f.SubmitCopy(channel, body, at)
}
