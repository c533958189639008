package brokertest

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves a goroutine behind: checks
// stopped half-way by a failure must still close their brokers.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
