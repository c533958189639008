package cluster

import (
	"errors"
	"fmt"
	"strings"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/resp"
)

// wrongEngine turns the error of New's first slot-map read into one
// wrapping shardcast.ErrWrongEngine that names sharded.New when a seed
// answered CLUSTER SLOTS as a standalone instance does ("ERR This
// instance has cluster support disabled"); any other error is returned
// as it is. The server's reply stays in the message and in the chain.
func wrongEngine(err error) error {
	if !standaloneReply(err) {
		return err
	}
	return fmt.Errorf("%w: a seed is a standalone Redis, not a cluster node (%w); "+
		"cluster.New is for Redis Cluster, use sharded.New for standalone instances", shardcast.ErrWrongEngine, err)
}

// standaloneReply reports whether err, or any error it joins, is a
// server's refusal of CLUSTER SLOTS for want of cluster support.
func standaloneReply(err error) bool {
	switch e := err.(type) {
	case nil:
		return false
	case *resp.ServerError:
		return strings.Contains(e.Msg, "cluster support disabled")
	case interface{ Unwrap() []error }:
		for _, inner := range e.Unwrap() {
			if standaloneReply(inner) {
				return true
			}
		}
		return false
	}
	return standaloneReply(errors.Unwrap(err))
}
