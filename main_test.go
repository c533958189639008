package shardcast_test

import (
	"testing"

	"github.com/shardcast/shardcast/internal/redistest"
	"go.uber.org/goleak"
)

// TestMain fails the package if a test or an Example leaves a goroutine
// behind, after stopping the Redis servers the Examples started (see
// example_redis_test.go).
//
// Two rueidis goroutines are exempt, as in the cluster package's tests:
// both are owned by rueidis, have no stop path and end on their own (a
// delayed close of connections to nodes that left its slot map, and a
// refresh scheduled after a MOVED reply).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(redistest.StoppingOnDemand(m),
		goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*clusterClient)._refresh.func2"),
		goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*call).DelayDo.func1"),
	)
}
