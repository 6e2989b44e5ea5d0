package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"spindle.dev"
)

// A source that ends in / stands for its contents (rsync's rule): copied
// twice into the same DST, it merges instead of nesting, as the same
// source without the / does (cp's rule).
func TestCpContents(t *testing.T) {
	e := newEnv(t)
	e.file("photos/a.jpg", "A")
	e.file("photos/2026/b.jpg", "BB")
	local := filepath.Join(e.dir, "photos")
	want := tree(t, local)

	e.ok("cp", "-R", local, "@/nested")
	e.ok("cp", "-R", local, "@/nested") // It exists now: copied into it.
	if _, ok := e.spinTree("ann@example.com/nested")["photos/"]; !ok {
		t.Errorf("cp -R photos into an existing directory did not make photos inside it")
	}
	e.ok("cp", "-R", local+"/", "@/merged")
	e.ok("cp", "-R", local+"/", "@/merged")
	sameTree(t, "photos/ copied twice to @/merged", e.spinTree("ann@example.com/merged"), want)

	back := filepath.Join(e.dir, "back")
	os.Mkdir(back, 0o755)
	e.ok("cp", "-R", "@/merged/", back)
	sameTree(t, "@/merged/ copied to an existing local directory", tree(t, back), want)

	e.fails(exitFailure, "spin: cp: ann@example.com/merged/a.jpg: not a directory: a source that ends in / names a directory's contents\n"+
		"spin: hint: to copy the file, name it without a trailing /\n", "cp", "@/merged/a.jpg/", back)
}

// A flakyClient is the fake whose Puts fail, with an I/O error as when the
// node has gone away, when fail says so.
type flakyClient struct {
	*fakeClient
	mu    sync.Mutex
	calls int
	fail  func(call int) bool
}

func (c *flakyClient) Put(ctx context.Context, name spindle.PathName, r io.Reader, packing spindle.Packing, progress func(int64)) (*spindle.DirEntry, error) {
	c.mu.Lock()
	c.calls++
	n := c.calls
	c.mu.Unlock()
	if c.fail(n) {
		return nil, spindle.E(spindle.Op("client.Put"), name, spindle.IO, errors.New("connection refused"))
	}
	return c.fakeClient.Put(ctx, name, r, packing, progress)
}

// runWith runs spin as e.run does, with c as the client.
func (e *env) runWith(c spindle.Client, args ...string) (stderr string, code int) {
	var out, errb bytes.Buffer
	e.st = &State{
		Stdout:     &out,
		Stderr:     &errb,
		Home:       e.dir,
		Config:     &Config{Username: ann, Secrets: filepath.Join(e.dir, "keys")},
		NewClient:  func(context.Context, *Config) (spindle.Client, error) { return c, nil },
		isTerminal: func(io.Writer) bool { return false },
	}
	code = run(args, e.st)
	return errb.String(), code
}

// When the node goes away, cp stops after maxFailStreak files in a row
// have failed, with one diagnostic, how far it got and how to finish;
// failures that do not come in a row are each reported and the copy goes
// on.
func TestCpStopsWhenNodeGone(t *testing.T) {
	e := newEnv(t)
	const n = 200
	for i := range n {
		e.file(fmt.Sprintf("many/f%03d", i), "x")
	}
	src := filepath.Join(e.dir, "many")
	c := &flakyClient{fakeClient: e.client, fail: func(call int) bool { return call > 10 }}
	errs, code := e.runWith(c, "cp", "-j", "1", "-R", src, "@/many")
	want := "spin: cp: ann@example.com/many/f014: I/O error: connection refused\n" +
		"spin: cp: stopped after 5 files in a row failed: 10 of 200 files copied\n" +
		"spin: hint: once the node answers again, finish the copy, sending only what is missing, with: spin cp -R -u -j 1 " + src + "/ @/many\n"
	if code != exitFailure || errs != want {
		t.Errorf("node gone after 10 files: exit %d, stderr:\n%s\nwant:\n%s", code, errs, want)
	}
	if c.calls != 10+maxFailStreak {
		t.Errorf("%d puts tried, want %d", c.calls, 10+maxFailStreak)
	}

	// With files copied at once, those in flight when the copy stops
	// fail too, silently. (A failure that a file copied after it ends
	// before the streak is reached is reported, as with -j 1: with 16 at
	// once that may happen to the first few.)
	c = &flakyClient{fakeClient: e.client, fail: func(call int) bool { return call > 10 }}
	errs, code = e.runWith(c, "cp", "-R", src, "@/again")
	if lines := strings.Count(errs, "\n"); code != exitFailure || lines < 3 || lines > 3+cpWorkers || !strings.Contains(errs, "stopped after 5 files in a row failed: 10 of 200 files copied\n") {
		t.Errorf("-j %d: exit %d, %d lines:\n%s", cpWorkers, code, lines, errs)
	}
	if c.calls > 10+maxFailStreak+cpWorkers {
		t.Errorf("-j %d: %d puts tried, want at most %d", cpWorkers, c.calls, 10+maxFailStreak+cpWorkers)
	}

	// Every third file fails: never 5 in a row.
	c = &flakyClient{fakeClient: e.client, fail: func(call int) bool { return call%3 == 0 }}
	errs, code = e.runWith(c, "cp", "-j", "1", "-R", src, "@/flaky")
	if lines := strings.Count(errs, "\n"); code != exitFailure || lines != n/3 || strings.Contains(errs, "stopped") {
		t.Errorf("every third file failing: exit %d, %d lines, want %d:\n%s", code, lines, n/3, errs)
	}
}

// A file whose write was in flight when the node went away and that
// finishes during the streak of failures does not end the streak: only a
// file started after the failures began says the node is back.
func TestCpStreakIgnoresStragglers(t *testing.T) {
	var errb bytes.Buffer
	stopped := false
	cp := &copier{st: &State{Stdout: io.Discard, Stderr: &errb}, stop: func() { stopped = true }}
	ioErr := spindle.E(spindle.IO, errors.New("connection refused"))
	var stamps []int64
	for range 4 {
		stamps = append(stamps, cp.begin())
	}
	cp.finished(false, false, stamps[0], "f1", ioErr)
	cp.finished(false, false, stamps[1], "f2", nil) // In flight before the failure.
	if cp.streak != 1 || len(cp.held) != 1 || errb.Len() != 0 {
		t.Fatalf("after a straggler: streak %d, %d held, stderr %q; want 1, 1, nothing", cp.streak, len(cp.held), errb.String())
	}
	later := cp.begin()
	cp.finished(false, false, later, "f5", nil) // Started after it: the node answers.
	if cp.streak != 0 || len(cp.held) != 0 || !strings.Contains(errb.String(), "f1") {
		t.Fatalf("after a file started later: streak %d, %d held, stderr %q; want 0, 0, f1 reported", cp.streak, len(cp.held), errb.String())
	}
	for i := range maxFailStreak {
		s := cp.begin()
		if i == 2 {
			cp.finished(false, false, stamps[2], "f3", nil) // Another straggler.
		}
		cp.finished(false, false, s, fmt.Sprintf("g%d", i), ioErr)
	}
	if !stopped || cp.stopped == nil || cp.copied != 3 {
		t.Fatalf("after %d failures in a row around a straggler: stopped %v, %d copied", maxFailStreak, stopped, cp.copied)
	}
}
