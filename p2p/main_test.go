package p2p_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any of them leaves a goroutine
// running: every stream, host and handler ends with its context.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
