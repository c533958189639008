package main

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves a goroutine behind: the
// fleet closes every node it started.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
