package centrifugebroker

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/shardcast/shardcast"
)

// errWrongChannel reports a control frame on a client channel or a client
// frame on the control channel.
var errWrongChannel = errors.New("frame kind does not belong on this channel")

// deliver is the shardcast Handler: it decodes each message and hands it
// to Centrifuge. shardcast calls it in order for each channel, so
// Centrifuge sees the publications of a channel in publish order. Control
// commands go, in order, to the control goroutine (see controls).
func (b *Broker) deliver(m shardcast.Message) {
	if mb := b.maps.Load(); mb != nil {
		if ch, ok := strings.CutPrefix(m.Channel, mb.prefix); ok {
			mb.deliver(ch, m)
			return
		}
	}
	f, err := decode(m.Payload, m.PublishedAt)
	if err == nil && ((m.Channel == b.control) != (f.kind == kindControl) || f.kind == kindMapPublication || f.kind == kindMapDelta) {
		err = errWrongChannel
	}
	if err != nil {
		b.badFrames.add(m.Channel, len(m.Payload), err)
		return
	}
	if f.kind == kindControl {
		if f.target != "" && f.target != b.node.ID() {
			return // for another node
		}
		if b.controls.Load() != nil {
			// Copied: the engine may reuse the payload's memory once this
			// returns (Options.ReusePayloads).
			b.controlQueue.add(append([]byte(nil), f.control...))
		}
		return
	}
	h := b.events.Load()
	if h == nil {
		return // before node.Run: nobody can be subscribed yet
	}
	switch f.kind {
	case kindPublication, kindPositioned, kindPositionedDelta:
		clonePublicationData(&f)
		_ = (*h).HandlePublication(m.Channel, f.pub, f.sp, f.delta, f.prevPub)
	case kindJoin:
		_ = (*h).HandleJoin(m.Channel, f.info)
	case kindLeave:
		_ = (*h).HandleLeave(m.Channel, f.info)
	}
}

// clonePublicationData copies the data of f's publications. decode shares
// it with the payload, whose memory the engine reuses once the handler
// returns (the adapter runs it with Options.ReusePayloads), and Centrifuge
// may keep the Publication (a subscriber's recovery buffer, a channel
// medium's cache). Everything else decode returns is a copy.
func clonePublicationData(f *frame) {
	f.pub.Data = bytes.Clone(f.pub.Data)
	if f.prevPub != nil {
		f.prevPub.Data = bytes.Clone(f.prevPub.Data)
	}
}

// dropLogEvery is the least time between two log lines about one kind of
// dropped message: a foreign publisher flooding a channel must not flood
// the log.
const dropLogEvery = time.Second

// logLimit lets one log line through per dropLogEvery.
type logLimit struct {
	last atomic.Int64 // UnixNano of the last line let through
}

// allow reports whether a line may be logged now; of callers racing, one
// gets through.
func (l *logLimit) allow() bool {
	now := time.Now().UnixNano()
	last := l.last.Load()
	return now-last >= int64(dropLogEvery) && l.last.CompareAndSwap(last, now)
}

// badFrames counts dropped frames and logs them, at most once per
// dropLogEvery.
type badFrames struct {
	count atomic.Uint64
	limit logLimit
	log   *slog.Logger
}

func (c *badFrames) add(channel string, size int, err error) {
	n := c.count.Add(1)
	if !c.limit.allow() {
		return
	}
	c.log.Warn("centrifugebroker: dropped a message that is not a frame of this adapter",
		"channel", channel, "bytes", size, "err", err, "dropped_total", n)
}
