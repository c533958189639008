// Package notsent holds the one error value that says a message certainly
// never reached Redis. The publish wire (internal/pubconn) returns it and
// the root package exports it as shardcast.ErrNotSent, so the wire needs
// nothing of the package above it and errors.Is holds across both.
package notsent

import "errors"

// Err is shardcast.ErrNotSent.
var Err = errors.New("shardcast: not sent")
