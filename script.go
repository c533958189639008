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
