package redistest

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if any test leaves a goroutine behind: the
// harness promises other packages' goleak checks that it cleans up fully.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
