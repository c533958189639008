// Package resp reads and writes RESP2, the wire protocol of Redis, for the
// connections shardcast owns: the subscribe wire (internal/subconn), the
// publish pipeline (internal/pubconn) and the test harness
// (redistest).
//
// The Reader's primitives (Line, Bulk, ArrayHeader, Skip, ParseInt) work on
// the bytes of a bufio.Reader in place and allocate nothing per value, so
// the hot read loops built on them allocate nothing per message; Reply
// decodes a whole value into Go values for code that may allocate. The
// Append functions encode commands into a caller's buffer. Error replies
// become *ServerError, bytes that are not RESP2 ErrProtocol, and Auth runs
// the AUTH handshake of a new connection.
//
//	b := resp.AppendCommand(nil, "SUBSCRIBE", []string{"news"})
//	// ... write b, then read the confirmation:
//	rd := resp.NewReader(bufio.NewReader(conn))
//	reply, err := rd.Reply() // []any{"subscribe", "news", int64(1)}
package resp
