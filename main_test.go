package shardcast_test

import (
	"testing"

	"github.com/shardcast/shardcast/redistest"
	"go.uber.org/goleak"
)

// TestMain fails the package if a test or an Example leaves a goroutine
// behind, after stopping the Redis servers the Examples started (see
// example_redis_test.go).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(redistest.StoppingOnDemand(m))
}
