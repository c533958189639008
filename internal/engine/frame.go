package engine

import (
	"sync"
	"time"
	"unsafe"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/envelope"
)

// Frame is a reusable buffer holding one outbound message and, for the
// cluster engine, its wire key.
type Frame struct {
	buf    []byte
	keyLen int // buf[:keyLen] is the key, buf[keyLen:] the message
}

var framePool = sync.Pool{New: func() any { return &Frame{buf: make([]byte, 0, 512)} }}

// NewKeyedFrame returns a pooled frame holding payload, wrapped in an
// envelope stamped with now unless raw, after channel's wire key under
// layout (none when layout is nil) in the same buffer, so that a publish
// allocates no key string.
func NewKeyedFrame(layout *shardcast.Layout, channel string, payload []byte, raw bool, now time.Time) *Frame {
	f := framePool.Get().(*Frame)
	f.buf = f.buf[:0]
	if layout != nil {
		f.buf = layout.AppendKey(f.buf, channel)
	}
	f.keyLen = len(f.buf)
	if raw {
		f.buf = append(f.buf, payload...)
	} else {
		f.buf = envelope.Append(f.buf, now, payload)
	}
	return f
}

// String views the message as a string without copying. The string is
// only valid until Release.
func (f *Frame) String() string {
	msg := f.buf[f.keyLen:]
	return unsafe.String(unsafe.SliceData(msg), len(msg))
}

// Key views the wire key as a string without copying; it is only valid
// until Release.
func (f *Frame) Key() string { return unsafe.String(unsafe.SliceData(f.buf), f.keyLen) }

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
