package engine

import (
	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/pubconn"
)

// PubTimeouts are the bounds of a publishing connection under o.
func PubTimeouts(o shardcast.ConnOptions) pubconn.Timeouts {
	return pubconn.Timeouts{Write: o.WriteTimeout, Reply: o.ReplyTimeout, Redial: o.ReconnectMin}
}
