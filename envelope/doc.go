// Package envelope is shardcast's wire frame: the bytes a publisher puts on
// a Redis channel so that subscribers get the payload back together with the
// publisher's clock at publish time, and can measure delivery lag.
//
// # Frame layout (version 1)
//
// This layout is a wire contract between every shardcast node on a channel,
// whatever its version: it never changes in place. A new layout gets a new
// version byte.
//
//	offset  size  field
//	0       1     magic: 0xC1
//	1       1     version: 0x01
//	2       8     publish time: microseconds since 1970-01-01T00:00:00Z,
//	              unsigned 64-bit, big-endian; 0 means "unknown"
//	10      n     payload: every remaining byte, as published
//
// A frame is valid when it has at least 10 bytes, starts with 0xC1 0x01, and
// its publish time is 0 or lies in [10^15, 10^16) microseconds, that is from
// 2001-09-09T01:46:40Z up to, not including, 2286-11-20T17:46:40Z. The
// payload may be empty.
//
// For example, the payload "hello" published at 2023-11-14T22:13:20.123456Z
// (1700000000123456 µs) is the 15 bytes
//
//	c1 01 00 06 0a 24 18 20 22 40 68 65 6c 6c 6f
//
// # Why these bytes
//
// A subscriber must not mistake a foreign message for a frame. 0xC1 never
// occurs in UTF-8 text, so no text, JSON or XML payload can start a frame,
// and MessagePack leaves 0xC1 unused. The time range makes byte 2 always
// 0x00 and keeps only about one 64-bit pattern in 2,000; together with the
// two fixed bytes, random binary data passes for a frame about once in 130
// million messages. The fixed-size big-endian time needs no varint decoder,
// which keeps the frame easy to produce outside Go.
//
// # Raw mode and other languages
//
// With shardcast.Options.Raw set, engines skip the envelope entirely: the
// payload goes on the wire as it is and Message.PublishedAt is zero. That is
// the interop path: publishers and subscribers that are not shardcast see
// plain Redis Pub/Sub payloads. Every node on a channel should agree on the
// mode. An enveloped subscriber does not reject a message that fails
// Decode (a raw or foreign publisher's): it delivers the bytes as they came,
// with a zero Message.PublishedAt, and counts the message in
// shardcast.Stats.BadFrames. A raw subscriber hands the frame header to the
// application as part of the payload.
//
// A publisher in another language that wants lag measurement can write
// frames itself instead; in Python, for example:
//
//	frame = b"\xc1\x01" + struct.pack(">Q", time.time_ns() // 1000) + payload
//
// Writing 0 as the time is valid when no clock is at hand; subscribers then
// see a zero PublishedAt.
//
// Decode never copies: the payload it returns aliases the frame.
package envelope
