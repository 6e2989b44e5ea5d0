package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"spindle.dev"
	"spindle.dev/node"
)

// A spinUser runs spin as a process, as one user with a home of its own,
// against a real node; and looks at the user's tree through a client of
// its own in this process.
type spinUser struct {
	t    testing.TB
	spin string // The spin program.
	home string
	st   *State // For the in-process client.
}

// newSpinUser returns a user of the node at addr, signed up, or skips the
// test where spin cannot run as a process.
func newSpinUser(t testing.TB) *spinUser {
	if testing.Short() || runNode == nil {
		t.Skip("runs spin as a process, against a node")
	}
	spin, err := exec.LookPath("spin") // testscript puts this test binary on PATH as spin.
	if err != nil {
		t.Skip("spin is not on PATH:", err)
	}
	return &spinUser{t: t, spin: spin, home: t.TempDir()}
}

func (u *spinUser) command(args ...string) *exec.Cmd {
	cmd := exec.Command(u.spin, args...)
	cmd.Env = append(os.Environ(), "HOME="+u.home)
	return cmd
}

// run runs spin and fails the test unless it exits 0.
func (u *spinUser) run(args ...string) {
	u.t.Helper()
	if out, err := u.command(args...).CombinedOutput(); err != nil {
		u.t.Fatalf("spin %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// signup makes the user ann on the node at addr.
func (u *spinUser) signup(addr string) {
	u.t.Helper()
	u.run("init", "-node", addr, "ann@example.com")
	u.run("signup")
	u.st = &State{Home: u.home, Stderr: &bytes.Buffer{}, NewClient: dialClient, Log: slog.New(slog.DiscardHandler)}
	u.t.Cleanup(func() {
		if u.st.client != nil {
			u.st.client.Close()
		}
	})
}

// files returns the sequence number of every file matched by pattern.
func (u *spinUser) files(pattern string) map[spindle.PathName]int64 {
	u.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := u.st.Client(ctx)
	if err != nil {
		u.t.Fatal(u.st.Stderr)
	}
	entries, err := c.Glob(ctx, pattern)
	if errors.Is(err, spindle.NotExist) {
		return nil // Not made yet.
	}
	if err != nil {
		u.t.Fatalf("glob %s: %v", pattern, err)
	}
	m := map[spindle.PathName]int64{}
	for _, e := range entries {
		if !e.Attr.IsDir() {
			m[e.Name] = e.Sequence
		}
	}
	return m
}

// start starts spin cp with args, and returns it with its stderr.
func (u *spinUser) start(args ...string) (*exec.Cmd, *bytes.Buffer) {
	u.t.Helper()
	cmd := u.command(args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		u.t.Fatal(err)
	}
	u.t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd, &stderr
}

// waitFiles waits until pattern matches at least n files.
func (u *spinUser) waitFiles(pattern string, n int) {
	u.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for len(u.files(pattern)) < n {
		if time.Now().After(deadline) {
			u.t.Fatalf("fewer than %d files match %s after a minute", n, pattern)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// resumeHint returns the arguments of the command the hint in stderr
// gives to finish a copy.
func resumeHint(t *testing.T, stderr string) []string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^spin: hint: .*sending only what is missing, (?:use|with): spin (.*)$`).FindStringSubmatch(stderr)
	if m == nil {
		t.Fatalf("no hint to finish the copy in:\n%s", stderr)
	}
	return strings.Fields(m[1])
}

// makeTree writes files small files in dirs of 100 below dir, and big
// files of 2.5 MiB (three blocks each).
func makeTree(t *testing.T, dir string, files, big int) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range files {
		f := filepath.Join(dir, fmt.Sprintf("d%d", i/100), fmt.Sprintf("f%04d", i))
		os.MkdirAll(filepath.Dir(f), 0o755)
		if err := os.WriteFile(f, fmt.Appendf(nil, "file %d %x\n", i, r.Uint64()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for i := range big {
		data := make([]byte, 5*spindle.MaxBlockSize/2)
		for j := range data {
			data[j] = byte(r.Uint32())
		}
		f := filepath.Join(dir, "big", fmt.Sprintf("b%d", i))
		os.MkdirAll(filepath.Dir(f), 0o755)
		if err := os.WriteFile(f, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// sameAsSource copies the spin tree dst back and compares it with src.
func (u *spinUser) sameAsSource(src, dst string) {
	u.t.Helper()
	back := filepath.Join(u.t.TempDir(), "back")
	u.run("cp", "-R", dst+"/", back)
	sameTree(u.t, "the copy of "+src, tree(u.t, back), tree(u.t, src))
}

// A copy interrupted by Ctrl-C says how far it got and how to finish; the
// command it gives sends only the files that are missing (the others keep
// the log entries they had), nests nothing, and leaves the source's tree.
// Run again after two files changed without changing size, it sends those
// two only.
func TestCpResume(t *testing.T) {
	u := newSpinUser(t)
	n, err := node.New(context.Background(), node.Config{Home: t.TempDir(), Writers: []string{"all"}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	u.signup(string(n.DialAddr()))
	src := filepath.Join(u.home, "src")
	const small, big = 1000, 2
	makeTree(t, src, small, big)
	// An Access file, whose text travels in its entry: sent again, it
	// would re-wrap the keys of every file in d0.
	if err := os.WriteFile(filepath.Join(src, "d0", "Access"), []byte("*: ann@example.com\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	const pattern = "ann@example.com/dst/*/*"

	cp, stderr := u.start("cp", "-R", "-j", "1", src, "@/dst")
	u.waitFiles(pattern, 50)
	if err := cp.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	cp.Wait()
	if code := cp.ProcessState.ExitCode(); code != exitInterrupted || !strings.Contains(stderr.String(), "spin: cp: interrupted: ") {
		t.Fatalf("interrupted cp: exit %d, stderr:\n%s", code, stderr)
	}
	resume := resumeHint(t, stderr.String())
	before := u.files(pattern)
	if len(before) == small+big+1 {
		t.Fatalf("every file was copied before the interruption")
	}
	if _, ok := before["ann@example.com/dst/d0/Access"]; !ok {
		t.Fatalf("d0/Access, the third file, was not copied before the interruption")
	}
	t.Logf("%d files copied before the interruption; finishing with: spin %s", len(before), strings.Join(resume, " "))

	u.run(resume...)
	after := u.files(pattern)
	if len(after) != small+big+1 {
		t.Errorf("%d files after finishing, want %d", len(after), small+big+1)
	}
	for name, seq := range before {
		if after[name] != seq {
			t.Errorf("%s sent again (sequence %d, then %d)", name, seq, after[name])
		}
	}
	u.sameAsSource(src, "@/dst")

	// Same sizes, other contents: a byte in the middle of a big file's
	// second block, and a small file.
	b0 := filepath.Join(src, "big", "b0")
	data, _ := os.ReadFile(b0)
	data[spindle.MaxBlockSize+10] ^= 1
	os.WriteFile(b0, data, 0o644)
	f := filepath.Join(src, "d3", "f0300")
	data, _ = os.ReadFile(f)
	data[0] = 'F'
	os.WriteFile(f, data, 0o644)
	u.run(resume...)
	sent := map[spindle.PathName]bool{}
	for name, seq := range u.files(pattern) {
		if after[name] != seq {
			sent[name] = true
		}
	}
	if fmt.Sprint(sent) != "map[ann@example.com/dst/big/b0:true ann@example.com/dst/d3/f0300:true]" {
		t.Errorf("after changing two files, sent %v", sent)
	}
	u.sameAsSource(src, "@/dst")
}

// When the node is killed mid-copy, cp stops soon after, with a few lines
// saying how far it got and how to finish; the command it gives finishes
// the copy once the node is back.
func TestCpNodeKilled(t *testing.T) {
	u := newSpinUser(t)
	nodeHome := filepath.Join(t.TempDir(), "node")
	startNode := func() *exec.Cmd {
		os.Remove(filepath.Join(nodeHome, "addr"))
		cmd := u.command("node", "-home", nodeHome, "-listen", "/ip4/127.0.0.1/tcp/0", "-writers", "all")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		deadline := time.Now().Add(time.Minute)
		for {
			if b, err := os.ReadFile(filepath.Join(nodeHome, "addr")); err == nil && len(b) > 0 {
				return cmd
			}
			if time.Now().After(deadline) {
				t.Fatal("the node did not start within a minute")
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	nodeCmd := startNode()
	addr, _ := os.ReadFile(filepath.Join(nodeHome, "addr"))
	first, _, _ := strings.Cut(string(addr), "\n")
	u.signup(first)
	src := filepath.Join(u.home, "src")
	const files = 3000
	makeTree(t, src, files, 0)
	const pattern = "ann@example.com/dst/*/*"

	cp, stderr := u.start("cp", "-R", src, "@/dst")
	u.waitFiles(pattern, 100)
	nodeCmd.Process.Kill()
	nodeCmd.Wait()
	killed := time.Now()
	done := make(chan struct{})
	go func() { cp.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatalf("cp still running a minute after the node was killed; stderr:\n%s", stderr)
	}
	t.Logf("cp stopped %v after the node was killed:\n%s", time.Since(killed).Round(time.Millisecond), stderr)
	errs := stderr.String()
	stopped := regexp.MustCompile(`(?m)^spin: cp: stopped after 5 files in a row failed: [0-9]+ of 3000 files copied$`)
	if code := cp.ProcessState.ExitCode(); code != exitFailure || !stopped.MatchString(errs) || strings.Count(errs, "\n") > 5 {
		t.Fatalf("cp with the node killed: exit %d, stderr:\n%s", code, errs)
	}
	resume := resumeHint(t, errs)

	startNode()
	u.run(resume...)
	if got := len(u.files(pattern)); got != files {
		t.Errorf("%d files after finishing, want %d", got, files)
	}
	u.sameAsSource(src, "@/dst")
}
