package centrifugebroker

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/centrifugal/centrifuge"
	"github.com/centrifugal/protocol"
)

// kind is the first byte of every frame: what the rest of it encodes. The
// values are non-printable so that a text payload of a foreign publisher
// is never mistaken for a frame.
type kind byte

const (
	kindPublication kind = 0x01
	kindJoin        kind = 0x02
	kindLeave       kind = 0x03
	kindControl     kind = 0x04
	// Publications kept in a history stream: the stream position travels
	// ahead of the Publication, written by the publish script (see
	// historyscripts.go), with the previous publication of the stream for
	// a delta.
	kindPositioned      kind = 0x05
	kindPositionedDelta kind = 0x06
	// Map publications (see MapBroker), on map channels only: a
	// positioned frame whose position is the map channel's stream's
	// (offset 0 and no epoch on an ephemeral channel), and whose previous
	// publication, for a delta, is the key's previous value.
	kindMapPublication kind = 0x07
	kindMapDelta       kind = 0x08
)

func (k kind) String() string {
	switch k {
	case kindPublication:
		return "publication"
	case kindJoin:
		return "join"
	case kindLeave:
		return "leave"
	case kindControl:
		return "control"
	case kindPositioned:
		return "positioned publication"
	case kindPositionedDelta:
		return "positioned delta publication"
	case kindMapPublication:
		return "map publication"
	case kindMapDelta:
		return "map delta publication"
	}
	return fmt.Sprintf("kind(0x%02x)", byte(k))
}

// Errors decode reports; a frame that fails with one is counted in
// Stats.BadFrames and dropped.
var (
	errEmptyFrame  = errors.New("empty frame")
	errUnknownKind = errors.New("unknown frame kind")
	errControlHead = errors.New("control frame: bad target length")
	errPosition    = errors.New("positioned publication: bad stream position")
)

// frame is one decoded message, ready to hand to Centrifuge.
type frame struct {
	kind kind
	// Publication frames.
	pub     *centrifuge.Publication
	sp      centrifuge.StreamPosition
	delta   bool
	prevPub *centrifuge.Publication
	// Join and leave frames.
	info *centrifuge.ClientInfo
	// Control frames: the node the message is for ("" for every node)
	// and Centrifuge's control command.
	target  string
	control []byte
}

// encodePublication returns the frame of a publication of data with opts.
// The fields mirror what Centrifuge's Redis broker carries when it keeps
// no history: Time is left out (the receiver takes it from the shardcast
// envelope), and the delta flag travels in Publication.Delta.
func encodePublication(data []byte, opts centrifuge.PublishOptions) ([]byte, error) {
	return appendPublication(nil, data, opts)
}

// appendPublication appends the frame encodePublication returns to buf.
func appendPublication(buf, data []byte, opts centrifuge.PublishOptions) ([]byte, error) {
	return appendProto(append(buf, byte(kindPublication)), publicationProto(data, opts))
}

// publicationProto is the Publication of a frame of data with opts.
func publicationProto(data []byte, opts centrifuge.PublishOptions) *protocol.Publication {
	return &protocol.Publication{
		Data:     data,
		Info:     infoToProto(opts.ClientInfo),
		Tags:     opts.Tags,
		Key:      opts.Key,
		Removed:  opts.Removed,
		Offset:   opts.Offset,
		Epoch:    opts.Epoch,
		PrevData: opts.PrevData,
		Version:  opts.Version,
		Delta:    opts.UseDelta,
	}
}

// appendProto appends the Protobuf encoding of p to buf.
func appendProto(buf []byte, p *protocol.Publication) ([]byte, error) {
	n, size := len(buf), p.SizeCF()
	buf = slices.Grow(buf, size)[:n+size]
	if _, err := p.MarshalToSizedBufferCF(buf[n:]); err != nil {
		return nil, fmt.Errorf("centrifugebroker: encode publication: %w", err)
	}
	return buf, nil
}

// framePool holds the buffers of published frames. Both engines copy a
// payload into their connection's write buffer before the command goes
// out, and keep no reference to it once Redis has answered: after a
// successful Publish its frame's buffer can carry the next one. (After a
// failed one it is left to the garbage collector: a command abandoned on
// a timeout may still be queued.)
var framePool = sync.Pool{New: func() any { return new([]byte) }}

// maxPooledFrame is the largest buffer kept in framePool, so that a burst
// of large publications does not leave large buffers behind.
const maxPooledFrame = 64 << 10

// releaseFrame returns the buffer of frame, whose publish succeeded, to
// framePool through bp, the pointer it came in.
func releaseFrame(bp *[]byte, frame []byte) {
	if cap(frame) <= maxPooledFrame {
		*bp = frame[:0]
		framePool.Put(bp)
	}
}

// encodeInfo returns the join or leave frame of info.
func encodeInfo(k kind, info *centrifuge.ClientInfo) ([]byte, error) {
	p := infoToProto(info)
	if p == nil {
		p = &protocol.ClientInfo{}
	}
	buf := make([]byte, 1+p.SizeCF())
	buf[0] = byte(k)
	if _, err := p.MarshalToSizedBufferCF(buf[1:]); err != nil {
		return nil, fmt.Errorf("centrifugebroker: encode %s: %w", k, err)
	}
	return buf, nil
}

// encodeControl returns the control frame carrying data to the node with
// ID target, or to every node if target is empty.
func encodeControl(target string, data []byte) []byte {
	buf := make([]byte, 0, 1+binary.MaxVarintLen64+len(target)+len(data))
	buf = append(buf, byte(kindControl))
	buf = binary.AppendUvarint(buf, uint64(len(target)))
	buf = append(buf, target...)
	return append(buf, data...)
}

// decode parses a frame. publishedAt is the publisher's clock from the
// shardcast envelope; it becomes Publication.Time, which Centrifuge uses
// for its pub/sub lag. It never panics; any input it cannot parse is an
// error. The frame may share memory with payload.
func decode(payload []byte, publishedAt time.Time) (frame, error) {
	if len(payload) == 0 {
		return frame{}, errEmptyFrame
	}
	f := frame{kind: kind(payload[0])}
	body := payload[1:]
	switch f.kind {
	case kindPublication:
		var p protocol.Publication
		if err := unmarshalPublication(body, &p); err != nil {
			return frame{}, fmt.Errorf("publication: %w", err)
		}
		f.pub, f.sp, f.delta, f.prevPub = pubFromProto(&p)
		if !publishedAt.IsZero() {
			f.pub.Time = publishedAt.UnixMilli()
		}
	case kindPositioned, kindPositionedDelta, kindMapPublication, kindMapDelta:
		return decodePositioned(f.kind, body, publishedAt)
	case kindJoin, kindLeave:
		var p protocol.ClientInfo
		if err := p.UnmarshalCF(body); err != nil {
			return frame{}, fmt.Errorf("%s: %w", f.kind, err)
		}
		f.info = infoFromProto(&p)
	case kindControl:
		n, w := binary.Uvarint(body)
		if w <= 0 || n > uint64(len(body)-w) {
			return frame{}, errControlHead
		}
		f.target = string(body[w : w+int(n)])
		f.control = body[w+int(n):]
	default:
		return frame{}, fmt.Errorf("%w 0x%02x", errUnknownKind, payload[0])
	}
	return f, nil
}

// dataTag is the key of Publication.Data (field 4, length-delimited): the
// first field of every Publication the adapter encodes, since MarshalCF
// writes fields in number order and 1 to 3 are reserved.
const dataTag = 4<<3 | 2

// unmarshalPublication decodes the Protobuf Publication b into p, like
// UnmarshalCF, except that when b starts with the data, as every
// Publication the adapter encodes does, p.Data shares b's memory instead
// of being a copy: a frame is allocated once per message by the engine
// and never written again, and copying the payload of every message was
// the largest cost of decoding it. Any other layout is decoded by
// UnmarshalCF alone.
func unmarshalPublication(b []byte, p *protocol.Publication) error {
	if len(b) < 2 || b[0] != dataTag {
		return p.UnmarshalCF(b)
	}
	n, w := binary.Uvarint(b[1:])
	if w <= 0 || n > uint64(len(b)-1-w) {
		return p.UnmarshalCF(b) // reports the malformed length
	}
	start := 1 + w
	end := start + int(n)
	if err := p.UnmarshalCF(b[end:]); err != nil {
		return err
	}
	if p.Data == nil { // else a later data field, which wins in Protobuf
		// Capped, so that an append to the data cannot write over the
		// fields after it.
		p.Data = b[start:end:end]
	}
	return nil
}

// pubFromProto turns a received Publication into what
// BrokerEventHandler.HandlePublication takes, the way Centrifuge's Redis
// broker does for publications without history: the stream position
// travels in Offset and Epoch (map broker fan-out), the delta flag in
// Delta, and the previous data of a delta in PrevData.
func pubFromProto(p *protocol.Publication) (pub *centrifuge.Publication, sp centrifuge.StreamPosition, delta bool, prev *centrifuge.Publication) {
	pub = pubAt(p, p.Offset)
	sp = centrifuge.StreamPosition{Offset: p.Offset, Epoch: p.Epoch}
	delta = p.Delta
	if len(p.PrevData) > 0 {
		prev, delta = &centrifuge.Publication{Data: p.PrevData}, true
	}
	return pub, sp, delta, prev
}

func infoToProto(v *centrifuge.ClientInfo) *protocol.ClientInfo {
	if v == nil {
		return nil
	}
	return &protocol.ClientInfo{Client: v.ClientID, User: v.UserID, ConnInfo: v.ConnInfo, ChanInfo: v.ChanInfo}
}

func infoFromProto(v *protocol.ClientInfo) *centrifuge.ClientInfo {
	if v == nil {
		return nil
	}
	info := &centrifuge.ClientInfo{ClientID: v.Client, UserID: v.User}
	if len(v.ConnInfo) > 0 {
		info.ConnInfo = v.ConnInfo
	}
	if len(v.ChanInfo) > 0 {
		info.ChanInfo = v.ChanInfo
	}
	return info
}
