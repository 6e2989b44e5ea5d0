package keyraft

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"spindle.dev"
)

// TestCrashKeepsAcknowledged runs a member in a child process that
// registers users as fast as it can and prints each name once Put has
// returned, kills it with SIGKILL mid-stream, and reopens its directory:
// every acknowledged registration must be there.
func TestCrashKeepsAcknowledged(t *testing.T) {
	if dir := os.Getenv("KEYRAFT_CRASH_CHILD"); dir != "" {
		crashChild(t, dir)
		return
	}
	if testing.Short() {
		t.Skip("runs a child process")
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashKeepsAcknowledged$", "-test.count=1")
	cmd.Env = append(os.Environ(), "KEYRAFT_CRASH_CHILD="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The child is killed after 40 acknowledgements, or after 20 s
	// whatever it prints (a child that hangs silently ends the read too).
	timer := time.AfterFunc(20*time.Second, func() { cmd.Process.Kill() })
	defer timer.Stop()
	var acked []spindle.UserName
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if name, ok := strings.CutPrefix(sc.Text(), "acked "); ok {
			acked = append(acked, spindle.UserName(name))
		}
		if len(acked) >= 40 {
			break
		}
	}
	cmd.Process.Kill()
	cmd.Wait()
	if len(acked) == 0 {
		t.Fatal("child acknowledged nothing")
	}

	c := diskCluster(t, dir, true)
	defer c.Close()
	ctx := ctxT(t)
	for _, name := range acked {
		if _, err := c.Lookup(ctx, name); err != nil {
			t.Errorf("acknowledged %s lost in the crash: %v", name, err)
		}
	}
	t.Logf("%d acknowledged registrations survived SIGKILL; %d records in the log", len(acked), sizeOf(c))
	mustPut(t, c, register(t, newSigner(t, bob)))
}

// crashChild registers users until it is killed, or at most 10,000.
func crashChild(t *testing.T, dir string) {
	c := diskCluster(t, dir, true)
	ctx := ctxT(t)
	for i := range 10000 {
		s := newSigner(t, spindle.UserName(fmt.Sprintf("crash%d@example.com", i)))
		if err := c.Put(ctx, register(t, s, "12D3KooWHost")); err != nil {
			t.Fatal(err)
		}
		fmt.Printf("acked %s\n", s.name)
	}
}
