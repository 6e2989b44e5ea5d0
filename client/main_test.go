package client

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any of them leaves a goroutine
// running: every server, stream and watch ends with its context or its
// owner's Close.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
