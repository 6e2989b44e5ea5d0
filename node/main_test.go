package node

import (
	"bytes"
	"runtime"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any of them leaves a goroutine
// running: every server, stream and watch ends with its context or its
// owner's Close.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// waitGone fails t unless, within a few seconds, no goroutine runs or
// was started by a function whose name contains fn. It catches what
// goleak at the end of the package cannot: a goroutine parked until a
// context that the test cancels only at its end.
func waitGone(t *testing.T, fn string) {
	t.Helper()
	var stacks []byte
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		stacks = nil
		for g := range bytes.SplitSeq(buf, []byte("\n\n")) {
			if bytes.Contains(g, []byte(fn)) {
				stacks = append(append(stacks, g...), "\n\n"...)
			}
		}
		if stacks == nil {
			return
		}
	}
	t.Fatalf("goroutines of %s still running:\n%s", fn, stacks)
}
