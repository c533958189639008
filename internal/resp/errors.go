package resp

import (
	"errors"
	"net"
	"strconv"
	"strings"
)

// ErrProtocol reports bytes that are not valid RESP2, or a reply that does
// not fit the command it should answer. The stream cannot be trusted after
// it: a connection that sees one is closed.
var ErrProtocol = errors.New("resp: protocol error")

// ServerError is an error reply from Redis: the command was refused, and
// the connection stays usable.
type ServerError struct {
	// Msg is the reply without its leading '-', e.g. "MOVED 3999 127.0.0.1:6381".
	Msg string
}

// Error returns the reply prefixed with "redis: ".
func (e *ServerError) Error() string { return "redis: " + e.Msg }

// IsMoved reports whether Redis redirected the command (MOVED or ASK):
// the node does not serve the command's slot.
func (e *ServerError) IsMoved() bool {
	return strings.HasPrefix(e.Msg, "MOVED ") || strings.HasPrefix(e.Msg, "ASK ")
}

// Redirect is a MOVED or ASK reply taken apart: where Redis Cluster says
// the command's slot is served.
type Redirect struct {
	// Ask is set for ASK (the slot is being migrated: resend once, after
	// ASKING, on Addr) and clear for MOVED (Addr owns the slot).
	Ask bool
	// Slot is the hash slot of the command's keys.
	Slot uint16
	// Addr is the node to resend to, "host:port" as net.JoinHostPort
	// builds it. Its host is empty when Redis does not know the node's
	// endpoint ("MOVED 3999 :6381"): the node is then reached at the host
	// of the one that answered.
	Addr string
}

// Redirect parses a MOVED or ASK reply; ok is false for any other reply,
// or for one whose slot or address does not parse.
func (e *ServerError) Redirect() (r Redirect, ok bool) {
	kind, rest, _ := strings.Cut(e.Msg, " ")
	switch kind {
	case "MOVED":
	case "ASK":
		r.Ask = true
	default:
		return Redirect{}, false
	}
	slot, addr, _ := strings.Cut(rest, " ")
	n, err := strconv.ParseUint(slot, 10, 16)
	if err != nil || n >= 16384 {
		return Redirect{}, false
	}
	// The host may be an IPv6 address, unbracketed: the port follows the
	// last colon.
	i := strings.LastIndexByte(addr, ':')
	if i < 0 {
		return Redirect{}, false
	}
	port, err := strconv.ParseUint(addr[i+1:], 10, 16)
	if err != nil || port == 0 {
		return Redirect{}, false
	}
	r.Slot = uint16(n)
	r.Addr = net.JoinHostPort(strings.Trim(addr[:i], "[]"), addr[i+1:])
	return r, true
}

// IsServerError reports whether err is (or wraps) a Redis error reply, and
// returns it.
func IsServerError(err error) (*ServerError, bool) {
	var se *ServerError
	ok := errors.As(err, &se)
	return se, ok
}
