package engine

import (
	"sync"
	"time"
	"unsafe"

	"github.com/shardcast/shardcast/internal/envelope"
)

// Frame is a reusable buffer holding one outbound message.
type Frame struct{ buf []byte }

var framePool = sync.Pool{New: func() any { return &Frame{buf: make([]byte, 0, 512)} }}

// NewFrame returns a pooled frame holding payload, wrapped in an envelope
// stamped with now unless raw.
func NewFrame(payload []byte, raw bool, now time.Time) *Frame {
	f := framePool.Get().(*Frame)
	if raw {
		f.buf = append(f.buf[:0], payload...)
	} else {
		f.buf = envelope.Append(f.buf[:0], now, payload)
	}
	return f
}

// String views the frame as a string without copying. The string is only
// valid until Release.
func (f *Frame) String() string { return unsafe.String(unsafe.SliceData(f.buf), len(f.buf)) }

// Release returns the frame to the pool. Call it only after the command
// carrying the frame succeeded: after any failure (an abandoned ctx, a
// broken wire) rueidis's writer may still read the frame, so leave it to
// the garbage collector.
func (f *Frame) Release() {
	if cap(f.buf) > 64<<10 {
		return // let oversized buffers go instead of pinning them
	}
	framePool.Put(f)
}
