package envelope

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

const (
	// Magic is the first byte of every frame.
	Magic byte = 0xC1
	// Version is the layout version this package writes, the second byte of
	// every frame. Decode accepts only this version.
	Version byte = 0x01
	// HeaderSize is the number of bytes before the payload.
	HeaderSize = 10
)

// The range of non-zero publish times a frame can carry, in microseconds
// since the Unix epoch: [minMicros, maxMicros). The range is part of the
// frame check, so it is part of the wire contract too.
const (
	minMicros = 1_000_000_000_000_000  // 2001-09-09T01:46:40Z
	maxMicros = 10_000_000_000_000_000 // 2286-11-20T17:46:40Z
)

// Resolution is the precision of a frame's publish time: Append truncates
// it to a whole microsecond, so a message was published up to Resolution
// after the time Decode returns (a window of loss built from publish
// times must reach that far to cover it).
const Resolution = time.Microsecond

var (
	// MinTime is the earliest publish time a frame can carry.
	MinTime = time.UnixMicro(minMicros).UTC()
	// MaxTime is the latest publish time a frame can carry.
	MaxTime = time.UnixMicro(maxMicros - 1).UTC()
)

// ErrBadFrame is wrapped by every error Decode returns: the input is not a
// frame this package can read (foreign data, truncated or corrupt). It never
// reaches the application: engines deliver such a message as it came and
// count it in shardcast.Stats.BadFrames.
var ErrBadFrame = errors.New("envelope: bad frame")

// The fixed failures are built once so that rejecting foreign messages, which
// a misconfigured peer can send at full rate, does not allocate.
var (
	errShort = fmt.Errorf("%w: shorter than the %d-byte header", ErrBadFrame, HeaderSize)
	errMagic = fmt.Errorf("%w: first byte is not 0x%02X, not a shardcast frame", ErrBadFrame, Magic)
	errTime  = fmt.Errorf("%w: publish time out of range", ErrBadFrame)
)

// Size returns the length of the frame for a payload of payloadLen bytes.
// A negative payloadLen counts as zero.
func Size(payloadLen int) int {
	return HeaderSize + max(payloadLen, 0)
}

// Append appends the frame for payload published at publishedAt to dst and
// returns the extended slice. It allocates nothing when dst has room for
// Size(len(payload)) more bytes, and grows dst once otherwise.
//
// The time is stored with microsecond precision (finer digits are
// truncated). A zero publishedAt is stored as "unknown". A non-zero time
// outside [MinTime, MaxTime] is clamped into it rather than rejected: a wrong
// publisher clock must skew the lag measurement, not lose the message.
func Append(dst []byte, publishedAt time.Time, payload []byte) []byte {
	if need := Size(len(payload)); cap(dst)-len(dst) < need {
		grown := make([]byte, len(dst), len(dst)+need)
		copy(grown, dst)
		dst = grown
	}
	dst = append(dst, Magic, Version)
	dst = binary.BigEndian.AppendUint64(dst, encodeTime(publishedAt))
	return append(dst, payload...)
}

func encodeTime(t time.Time) uint64 {
	if t.IsZero() {
		return 0
	}
	us := t.UnixMicro()
	switch {
	case us < minMicros:
		return minMicros
	case us >= maxMicros:
		return maxMicros - 1
	}
	return uint64(us)
}

// Decode splits a frame into its publish time (UTC, or the zero time when
// the publisher stored none) and its payload. The payload aliases frame: it
// is not copied, and is empty (not nil) when the frame carries no payload.
//
// Input that is not a valid frame (see the package doc) returns an error
// wrapping ErrBadFrame, a zero time and a nil payload. Decode never panics
// and allocates nothing, except to report an unknown version.
func Decode(frame []byte) (publishedAt time.Time, payload []byte, err error) {
	if len(frame) < HeaderSize {
		return time.Time{}, nil, errShort
	}
	if frame[0] != Magic {
		return time.Time{}, nil, errMagic
	}
	if frame[1] != Version {
		return time.Time{}, nil, fmt.Errorf("%w: version %d, this build reads version %d", ErrBadFrame, frame[1], Version)
	}
	us := binary.BigEndian.Uint64(frame[2:HeaderSize])
	switch {
	case us == 0:
		// The publisher had no clock to offer.
	case us < minMicros || us >= maxMicros:
		return time.Time{}, nil, errTime
	default:
		publishedAt = time.UnixMicro(int64(us)).UTC()
	}
	return publishedAt, frame[HeaderSize:], nil
}
