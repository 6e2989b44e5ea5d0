package host

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if one leaves a goroutine running:
// watches and compactions are the server's to end.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
