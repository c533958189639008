package shardcast

import (
	"crypto/sha1"
	"encoding/hex"
)

// Script is a Lua script a broker runs on the Redis node that carries a
// channel (the engines' Eval): the place to keep per-channel state, such as
// a history stream, next to the channel's messages and to publish with it
// in one atomic step. It is sent as EVALSHA, and as EVAL the first time a
// connection's server does not know it yet, so it is loaded once per
// connection. A Script is immutable and safe for concurrent use.
type Script struct {
	src, sha string
	runID    bool
}

// NewScript returns the script with Lua source src.
func NewScript(src string) *Script {
	sum := sha1.Sum([]byte(src))
	return &Script{src: src, sha: hex.EncodeToString(sum[:])}
}

// Source returns the script's Lua source.
func (s *Script) Source() string { return s.src }

// SHA returns the SHA1 digest Redis knows the script by.
func (s *Script) SHA() string { return s.sha }

// WithRunID returns a copy of s whose every call gets one more ARGV, last:
// the run_id of the Redis server the call runs on (INFO server), or ""
// where the server does not tell it (a user without permission for
// INFO). A server draws a run_id each time it starts, so a script that
// keeps the one it was given beside its data can tell, on a later call,
// that the data's server changed since it last wrote: a failover to a
// replica, a restart, a slot migrated. Any of them may have lost the
// last writes (replication is asynchronous, a restart loads the last
// snapshot), so state such as a stream's top offset may have gone back.
// Each connection learns its server's run_id once, with INFO server
// before its first such call; a call costs nothing more.
func (s *Script) WithRunID() *Script {
	c := *s
	c.runID = true
	return &c
}

// RunID reports whether calls of s get the server's run_id (WithRunID).
func (s *Script) RunID() bool { return s.runID }
