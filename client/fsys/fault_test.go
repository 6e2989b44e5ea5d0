package fsys_test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"spindle.dev"
	"spindle.dev/node/nodetest"
)

// hangBound is how long an operation may take, at most, before a test
// calls it hung: far beyond the mount's timeout, which bounds it on a
// quiet machine, so that a loaded one does not fail the test.
const hangBound = 45 * time.Second

// timed runs f and fails the test if it took longer than hangBound.
func timed(t *testing.T, what string, f func() error) error {
	t.Helper()
	start := time.Now()
	err := f()
	took := time.Since(start)
	t.Logf("%s: %v after %v", what, err, took.Round(time.Millisecond))
	if took > hangBound {
		t.Fatalf("%s took %v: hung", what, took)
	}
	return err
}

// The node is killed with SIGKILL in the middle of a read, a write and an
// ls: each fails, the mount still answers for what it has cached, and
// once the node is back the same operations succeed without remounting.
func TestNodeKilled(t *testing.T) {
	canMount(t)
	env := nodetest.New(t, nodetest.Setup{Kind: nodetest.Procs, Users: []spindle.UserName{ann}})
	const timeout = 3 * time.Second
	_, root := mount(t, env, ann, timeout)

	big := bytes.Repeat([]byte("0123456789abcdef"), 40<<20/16) // 40 blocks.
	check(t, os.WriteFile(filepath.Join(root, "big"), big, 0o644))
	check(t, os.Mkdir(filepath.Join(root, "cached"), 0o755))
	check(t, os.WriteFile(filepath.Join(root, "cached/small"), []byte("kept"), 0o644))
	check(t, os.Mkdir(filepath.Join(root, "other"), 0o755))
	check(t, os.WriteFile(filepath.Join(root, "other/x"), []byte("x"), 0o644))
	// Cache the directory and the small file; drop the kernel's cache of
	// its contents, so reading it again goes to the mount.
	if _, err := os.ReadDir(filepath.Join(root, "cached")); err != nil {
		t.Fatal(err)
	}
	if data, err := os.ReadFile(filepath.Join(root, "cached/small")); err != nil || string(data) != "kept" {
		t.Fatalf("reading the small file: %q, %v", data, err)
	}

	// A read in progress.
	rf, err := os.Open(filepath.Join(root, "big"))
	check(t, err)
	defer rf.Close()
	buf := make([]byte, 1<<20)
	_, err = io.ReadFull(rf, buf)
	check(t, err)
	// A write in progress.
	wf, err := os.Create(filepath.Join(root, "written"))
	check(t, err)
	defer wf.Close()
	_, err = wf.Write(big[:2<<20])
	check(t, err)

	env.KillNow()

	err = timed(t, "the rest of the read", func() error {
		_, err := io.Copy(io.Discard, rf)
		return err
	})
	if err == nil {
		t.Fatal("read the whole file with the node gone")
	}
	err = timed(t, "the end of the write", func() error {
		if _, err := wf.Write(big[2<<20 : 3<<20]); err != nil {
			return err
		}
		return wf.Close()
	})
	if err == nil {
		t.Fatal("stored a file with the node gone")
	}
	err = timed(t, "ls of a directory never listed", func() error {
		_, err := os.ReadDir(filepath.Join(root, "other"))
		return err
	})
	if err == nil {
		t.Fatal("listed a directory never listed before with the node gone")
	}
	// Meanwhile, what was cached is served.
	time.Sleep(1500 * time.Millisecond) // Past the kernel's and the unwatched caches' one second, so the mount is asked.
	err = timed(t, "ls of a cached directory", func() error {
		ents, err := os.ReadDir(filepath.Join(root, "cached"))
		if err == nil && (len(ents) != 1 || ents[0].Name() != "small") {
			t.Errorf("cached directory lists %v", ents)
		}
		return err
	})
	if err != nil {
		t.Fatalf("ls of a cached directory with the node gone: %v", err)
	}
	err = timed(t, "read of a cached file", func() error {
		data, err := os.ReadFile(filepath.Join(root, "cached/small"))
		if err == nil && string(data) != "kept" {
			t.Errorf("cached file reads %q", data)
		}
		return err
	})
	if err != nil {
		t.Fatalf("read of a cached file with the node gone: %v", err)
	}

	// The node returns; the same operations succeed, without remounting.
	check(t, env.StartAgain())
	waitFor(t, "reading the big file after the restart", func() error {
		data, err := os.ReadFile(filepath.Join(root, "big"))
		if err == nil && !bytes.Equal(data, big) {
			t.Fatal("big file differs after the restart")
		}
		return err
	})
	waitFor(t, "writing after the restart", func() error {
		return os.WriteFile(filepath.Join(root, "written"), big[:3<<20], 0o644)
	})
	got, err := os.ReadFile(filepath.Join(root, "written"))
	check(t, err)
	if !bytes.Equal(got, big[:3<<20]) {
		t.Fatal("written file differs")
	}
	waitFor(t, "ls after the restart", func() error {
		ents, err := os.ReadDir(filepath.Join(root, "other"))
		if err == nil && len(ents) != 1 {
			return errors.New("other lists the wrong names")
		}
		return err
	})
}
