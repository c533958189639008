package brokertest

import (
	"context"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
)

// T is the part of testing.TB the checks use. *testing.T satisfies it;
// the package's own tests pass a recorder instead, to see a check fail.
type T interface {
	Helper()
	Errorf(format string, args ...any)
	FailNow()
	Skipf(format string, args ...any)
	Cleanup(func())
	Context() context.Context
}

// Harness connects the suite to one engine.
type Harness struct {
	// New returns a broker on the engine's test servers built with opts
	// (whose Handler and OnEvent may be nil), and registers its Close with
	// t.Cleanup. It fails t if the broker cannot be built. Every broker of
	// one Harness must reach every other: what one publishes, another
	// subscribed to the channel receives.
	New func(t T, opts shardcast.Options) shardcast.Broker
	// KillSubscribers drops every subscribe connection the servers hold
	// (CLIENT KILL TYPE pubsub on each server). If nil, the check of
	// EventInterrupted and EventRestored is skipped.
	KillSubscribers func(t T)
	// Timeout bounds every wait for a condition (default 20 s: the test
	// machines are small, shared and run with -race).
	Timeout time.Duration
}

// DefaultTimeout is the wait bound used when Harness.Timeout is zero.
const DefaultTimeout = 20 * time.Second

// StatsReporter is the optional interface of brokers that expose
// counters. The Stats check runs only on brokers that implement it.
type StatsReporter interface {
	Stats() shardcast.Stats
}

// check is one property of the contract.
type check struct {
	name string
	run  func(t T, h Harness)
}

// checks lists every property, in the order Run runs them.
var checks = []check{
	{"DeliveryOnManyChannels", checkDeliveryOnManyChannels},
	{"PerChannelOrder", checkPerChannelOrder},
	{"Idempotent", checkIdempotent},
	{"UnsubscribeStopsDelivery", checkUnsubscribeStopsDelivery},
	{"CallsAfterClose", checkCallsAfterClose},
	{"PublishOnly", checkPublishOnly},
	{"BadInputChangesNothing", checkBadInput},
	{"ConcurrentCallsEndInLastCallState", checkConcurrentCalls},
	{"InterruptedThenRestored", checkInterruptedThenRestored},
	{"PublishedAt", checkPublishedAt},
	{"Stats", checkStats},
}

// Run checks every property of the shardcast.Broker contract against the
// engine h builds brokers for, one subtest per property, one after the
// other (a check may kill every subscribe connection on the servers).
func Run(t *testing.T, h Harness) {
	t.Helper()
	if h.New == nil {
		t.Fatal("brokertest: Harness.New is nil")
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) { c.run(t, h) })
	}
}

// timeout returns the bound of one wait.
func (h Harness) timeout() time.Duration {
	if h.Timeout > 0 {
		return h.Timeout
	}
	return DefaultTimeout
}

// Closing adapts an engine's constructor to Harness.New: the broker build
// returns is closed when the test ends, and an error from build or from
// Close fails the test.
func Closing(build func(opts shardcast.Options) (shardcast.Broker, error)) func(t T, opts shardcast.Options) shardcast.Broker {
	return func(t T, opts shardcast.Options) shardcast.Broker {
		t.Helper()
		b, err := build(opts)
		noError(t, err, "building a broker")
		t.Cleanup(func() {
			if err := b.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
		return b
	}
}
