package sharded

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves a goroutine behind: Close
// promises to stop everything the broker started.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
