package shardcast

import (
	"fmt"
	"time"
)

// HotDirection tells whether a HotChannel's messages were published or
// received by the broker.
type HotDirection uint8

const (
	// HotIn counts messages the broker received from the node.
	HotIn HotDirection = iota + 1
	// HotOut counts messages the broker published to the node.
	HotOut
)

// String returns "in" or "out".
func (d HotDirection) String() string {
	switch d {
	case HotIn:
		return "in"
	case HotOut:
		return "out"
	}
	return fmt.Sprintf("HotDirection(%d)", uint8(d))
}

// HotChannel is one of the busiest channels of the last complete
// hot-channel window, as estimated from the sampled messages (see
// Options.HotSampleRate). Estimates carry sampling noise: at the default
// 1%, a channel with 100 sampled messages in a window (10,000 messages)
// is counted within about ±20% with 95% confidence.
type HotChannel struct {
	// Channel is the application channel.
	Channel string
	// Direction tells whether the broker published or received it.
	Direction HotDirection
	// Node is the Redis instance or master (host:port) the messages came
	// from or were published to. It is "" for publishes of a broker built
	// without a Handler, whose engine knows no subscribe path to name it.
	Node string
	// Count is the estimated number of the channel's messages in the
	// window; it may exceed the truth by up to MaxError (counting error,
	// beside the sampling noise), never fall short of it but for noise.
	Count, MaxError uint64
	// Rate is Count per second of the window.
	Rate float64
	// Share is the channel's part of the messages the broker exchanged
	// with Node in Direction during the window, from 0 to 1.
	Share float64
	// Since and Until are the window's bounds.
	Since, Until time.Time
}
