package sharded

import (
	"testing"

	"github.com/shardcast/shardcast/redistest"
	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves a goroutine behind: Close
// promises to stop everything the broker started.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(redistest.StoppingOnDemand(m))
}
