package centrifugebroker

import (
	"bytes"
	"fmt"
	"strconv"
	"time"

	"github.com/centrifugal/centrifuge"
	"github.com/centrifugal/protocol"
)

// A publication kept in history is published by the publish script, which
// alone knows its offset and epoch, so the position is text the script can
// write: decimal digits and the epoch, each ended by ':'.
//
//	positioned       = 0x05 offset ':' epoch ':' publication
//	positioned delta = 0x06 offset ':' epoch ':' prevlen ':' prev publication
//	map              = 0x07 offset ':' epoch ':' publication
//	map delta        = 0x08 offset ':' epoch ':' prevlen ':' prev publication
//
// offset and prevlen are decimal; prev is the Protobuf Publication before
// this one in the stream (prevlen 0: none, the client gets the full data).

// maxDecimal is the length of the largest uint64 in decimal.
const maxDecimal = 20

// encodePositioned returns the frame the publish script writes for pub
// (a Protobuf Publication) at sp, with prev for a delta. It is the script's
// format in Go, for tests.
func encodePositioned(sp centrifuge.StreamPosition, delta bool, prev, pub []byte) []byte {
	k := kindPositioned
	if delta {
		k = kindPositionedDelta
	}
	buf := []byte{byte(k)}
	buf = strconv.AppendUint(buf, sp.Offset, 10)
	buf = append(buf, ':')
	buf = append(buf, sp.Epoch...)
	buf = append(buf, ':')
	if delta {
		buf = strconv.AppendInt(buf, int64(len(prev)), 10)
		buf = append(buf, ':')
		buf = append(buf, prev...)
	}
	return append(buf, pub...)
}

// decodePositioned parses the body of a positioned frame of kind k.
func decodePositioned(k kind, body []byte, publishedAt time.Time) (frame, error) {
	offset, body, ok := cutDecimal(body)
	if !ok {
		return frame{}, errPosition
	}
	i := bytes.IndexByte(body, ':')
	if i < 0 {
		return frame{}, errPosition
	}
	f := frame{kind: k, sp: centrifuge.StreamPosition{Offset: offset, Epoch: string(body[:i])}}
	body = body[i+1:]
	if k == kindPositionedDelta || k == kindMapDelta {
		f.delta = true
		n, rest, ok := cutDecimal(body)
		if !ok || n > uint64(len(rest)) {
			return frame{}, errPosition
		}
		if n > 0 {
			var prev protocol.Publication
			if err := unmarshalPublication(rest[:n], &prev); err != nil {
				return frame{}, fmt.Errorf("%s: previous publication: %w", k, err)
			}
			f.prevPub = pubAt(&prev, 0)
		}
		body = rest[n:]
	}
	var p protocol.Publication
	if err := unmarshalPublication(body, &p); err != nil {
		return frame{}, fmt.Errorf("%s: %w", k, err)
	}
	f.pub = pubAt(&p, offset)
	if !publishedAt.IsZero() {
		f.pub.Time = publishedAt.UnixMilli()
	}
	return f, nil
}

// cutDecimal parses the decimal number b starts with, ended by ':', and
// returns it with the rest after the ':'.
func cutDecimal(b []byte) (uint64, []byte, bool) {
	i := bytes.IndexByte(b[:min(len(b), maxDecimal+1)], ':')
	if i <= 0 {
		return 0, nil, false
	}
	for _, c := range b[:i] {
		if c < '0' || c > '9' {
			return 0, nil, false
		}
	}
	n, err := strconv.ParseUint(string(b[:i]), 10, 64)
	if err != nil {
		return 0, nil, false
	}
	return n, b[i+1:], true
}

// pubAt turns a protocol Publication into Centrifuge's, at offset: the
// stream's for a positioned frame or a history entry (the map broker
// fields a foreign writer may have set are then not used), the frame's own
// Offset for a plain publication.
func pubAt(p *protocol.Publication, offset uint64) *centrifuge.Publication {
	return &centrifuge.Publication{
		Offset:  offset,
		Data:    p.Data,
		Info:    infoFromProto(p.Info),
		Tags:    p.Tags,
		Time:    p.Time,
		Channel: p.Channel,
		Key:     p.Key,
		Removed: p.Removed,
		Score:   p.Score,
		Version: p.Version,
	}
}
