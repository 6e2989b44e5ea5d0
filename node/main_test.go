package node

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// runCommandEnv, when set, makes the test binary run RunCommand with the
// arguments it holds (separated by newlines) and exit with its code (see
// runInChild).
const runCommandEnv = "SPINDLE_NODE_TEST_RUN"

// TestMain fails the package's tests if any of them leaves a goroutine
// running: every server, stream and watch ends with its context or its
// owner's Close.
func TestMain(m *testing.M) {
	if args, ok := os.LookupEnv(runCommandEnv); ok {
		os.Exit(RunCommand(context.Background(), strings.Split(args, "\n"), os.Stdout, os.Stderr, slog.New(slog.DiscardHandler), nil))
	}
	goleak.VerifyTestMain(m)
}

// runInChild runs RunCommand with args in a child process, for a node
// that fails to start in a way that leaks goroutines in libp2p, not ours:
// libp2p.New (v0.49) closes nothing of the swarm whose Listen fails, so a
// node that finds its address busy would fail goleak here. It returns
// the exit code and what the command wrote to stderr.
func runInChild(t *testing.T, args []string) (int, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), runCommandEnv+"="+strings.Join(args, "\n"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, stderr.String()
	case errors.As(err, &exit):
		return exit.ExitCode(), stderr.String()
	}
	t.Fatal(err)
	return 0, ""
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
