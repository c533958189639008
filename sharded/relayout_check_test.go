package sharded

import (
	"cmp"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/brokertest"
)

// The re-layout fault tests check every message with brokertest's
// per-message checker (brokertest.FaultFleet, CheckMessages): every
// accepted message delivered once, or lost inside a window its
// subscriber's broker reported for the channel; in order, or out of order
// on a channel an EventRelayout wrapping ErrRelayoutOrder named.

// faultConn are connection settings that notice a dead or frozen
// instance quickly, so that the fault tests stay short.
var faultConn = shardcast.ConnOptions{
	DialTimeout: time.Second, CommandTimeout: time.Second,
	HealthInterval: 100 * time.Millisecond, HealthTimeout: 300 * time.Millisecond,
	ReplyTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond,
	ReconnectMax: 200 * time.Millisecond, RecoveryInterval: 100 * time.Millisecond,
}

// faultPublishers is how many goroutines of each broker publish, each to
// its own share of the channels under a publisher name of its own.
var faultPublishers = 1

// newFaultFleet starts n brokers of cfg (its Options replaced but for
// Workers and QueueSize, 1<<16 when 0), each subscribing every channel and
// publishing numbered messages to all of them.
func newFaultFleet(t *testing.T, n int, cfg Config, channels []string) *brokertest.FaultFleet {
	return brokertest.NewFaultFleet(t, n, channels, brokertest.FaultFleetOptions{Publishers: faultPublishers},
		func(h shardcast.Handler, ev func(shardcast.Event)) shardcast.Broker {
			c := cfg
			c.Options = shardcast.Options{Handler: h, OnEvent: ev, Workers: cfg.Options.Workers, QueueSize: cmp.Or(cfg.Options.QueueSize, 1<<16)}
			return newBroker(t, c)
		})
}
