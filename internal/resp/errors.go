package resp

import (
	"errors"
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

// IsServerError reports whether err is (or wraps) a Redis error reply, and
// returns it.
func IsServerError(err error) (*ServerError, bool) {
	var se *ServerError
	ok := errors.As(err, &se)
	return se, ok
}
