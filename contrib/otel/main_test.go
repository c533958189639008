package shardcastotel_test

import (
	"testing"

	"github.com/shardcast/shardcast/redistest"
	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves a goroutine behind, the
// brokers' and the meter providers' included.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(redistest.StoppingOnDemand(m))
}
