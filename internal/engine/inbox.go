package engine

import (
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/envelope"
)

// Inbox turns wire messages into shardcast.Messages and hands them to the
// worker pool. It runs on socket read loops, so it never blocks.
type Inbox struct {
	Pool      *shardcast.WorkerPool
	Raw       bool
	received  atomic.Uint64
	badFrames atomic.Uint64
}

// Deliver decodes payload (unless Raw) and submits the message. channel
// is the application channel name. Both may be views of a read buffer,
// valid only during the call: Deliver copies the channel and the body into
// one allocation, the message's only one. Payload is placed after the
// channel's bytes, so a handler writing into it (which it must not do)
// could still never change the channel string.
func (in *Inbox) Deliver(channel string, payload []byte) {
	in.received.Add(1)
	var at time.Time
	body := payload
	if !in.Raw {
		t, b, err := envelope.Decode(payload)
		if err != nil {
			in.badFrames.Add(1)
		} else {
			body, at = b, t
		}
	}
	buf := make([]byte, len(channel)+len(body))
	copy(buf, channel)
	copy(buf[len(channel):], body)
	m := shardcast.Message{Channel: unsafe.String(unsafe.SliceData(buf), len(channel)), PublishedAt: at}
	if len(body) > 0 {
		m.Payload = buf[len(channel):]
	}
	in.Pool.Submit(m)
}

// Received returns how many messages were read from Redis.
func (in *Inbox) Received() uint64 { return in.received.Load() }

// BadFrames returns how many messages failed to decode.
func (in *Inbox) BadFrames() uint64 { return in.badFrames.Load() }
