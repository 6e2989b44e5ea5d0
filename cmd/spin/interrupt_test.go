package main

import (
	"bufio"
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"spindle.dev/node"
)

// A command stopped by Ctrl-C exits with 130, as shells report a SIGINT.
func TestInterruptExits130(t *testing.T) {
	if testing.Short() || runNode == nil {
		t.Skip("runs spin as a process, against a node")
	}
	spin, err := exec.LookPath("spin") // testscript puts this test binary on PATH as spin.
	if err != nil {
		t.Skip("spin is not on PATH:", err)
	}
	ctx := context.Background()
	n, err := node.New(ctx, node.Config{Home: t.TempDir(), Writers: []string{"all"}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	home := t.TempDir()
	run := func(args ...string) {
		t.Helper()
		cmd := exec.Command(spin, args...)
		cmd.Env = append(os.Environ(), "HOME="+home)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("spin %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	run("init", "-node", string(n.DialAddr()), "ann@example.com")
	run("signup")

	watch := exec.Command(spin, "watch", "-new", "@")
	watch.Env = append(os.Environ(), "HOME="+home)
	out, err := watch.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := watch.Start(); err != nil {
		t.Fatal(err)
	}
	defer watch.Process.Kill()
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	// The watch is running once it reports a change made after it started.
	deadline := time.After(time.Minute)
	for seen := false; !seen; {
		f := filepath.Join(home, "f")
		os.WriteFile(f, []byte("x"), 0o600)
		run("put", f, "@/f")
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("watch ended before it was interrupted")
			}
			seen = strings.Contains(l, "ann@example.com/f")
		case <-time.After(2 * time.Second):
		case <-deadline:
			t.Fatal("the watch reported nothing within a minute")
		}
	}
	if err := watch.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	err = watch.Wait()
	if code := watch.ProcessState.ExitCode(); code != 130 {
		t.Fatalf("interrupted watch exited with %d (%v), want 130", code, err)
	}
}
