package fsys_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
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
	cache := t.TempDir()
	_, root := mountCache(t, env, ann, timeout, cache)

	big := bytes.Repeat([]byte("0123456789abcdef"), 40<<20/16) // 40 blocks.
	check(t, os.WriteFile(filepath.Join(root, "big"), big, 0o644))
	check(t, os.Mkdir(filepath.Join(root, "cached"), 0o755))
	check(t, os.WriteFile(filepath.Join(root, "cached/small"), []byte("kept"), 0o644))
	// Made by another client: this mount never listed it.
	other, err := env.Client(ann)
	check(t, err)
	_, err = other.MakeDirectory(context.Background(), "ann@example.com/other")
	check(t, err)
	_, err = other.Put(context.Background(), "ann@example.com/other/x", bytes.NewReader([]byte("x")), 0, nil)
	check(t, err)
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
	if err != nil {
		// Closing does not wait for the put.
		t.Fatalf("closing a file written with the node gone: %v; want it queued", err)
	}
	// The put fails in the background, and the next operation on the
	// file says so; its contents stay in the staging directory.
	err = timed(t, "the failed put reported", func() error {
		for start := time.Now(); time.Since(start) < hangBound; time.Sleep(50 * time.Millisecond) {
			f, err := os.Open(filepath.Join(root, "written"))
			if err != nil {
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
		}
		return nil
	})
	if !errors.Is(err, syscall.EIO) {
		t.Fatalf("the operation after a failed put: %v, want EIO", err)
	}
	if !stagedWith(t, cache, big[:3<<20]) {
		t.Fatal("no staging file holds the file whose put failed")
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
	// The failed put is tried again, and lands.
	c, err := env.Client(ann)
	check(t, err)
	waitFor(t, "the failed put landing after the restart", func() error {
		return sameStored(c, "ann@example.com/written", big[:3<<20])
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

// stagedWith reports whether a staging file under the mount's cache
// directory holds data.
func stagedWith(t *testing.T, cache string, data []byte) bool {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(cache, "staging", "file-*"))
	check(t, err)
	for _, f := range files {
		if got, err := os.ReadFile(f); err == nil && bytes.Equal(got, data) {
			return true
		}
	}
	return false
}

// sameStored returns nil if name is stored with contents data.
func sameStored(c spindle.Client, name spindle.PathName, data []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f, err := c.Open(ctx, name)
	if err != nil {
		return err
	}
	defer f.Close()
	got, err := io.ReadAll(f)
	if err != nil {
		return err
	}
	if !bytes.Equal(got, data) {
		return fmt.Errorf("%s holds %d bytes, not the %d written", name, len(got), len(data))
	}
	return nil
}

// The node hangs (SIGSTOP): its connections stay open and nothing
// answers. Every operation of the mount is answered within its bound —
// a read of a file never read, a lookup, an ls, an fsync fail; a close
// queues the file — and once the node goes on, the queued file lands
// and the same operations succeed.
func TestNodeHung(t *testing.T) {
	canMount(t)
	env := nodetest.New(t, nodetest.Setup{Kind: nodetest.Procs, Users: []spindle.UserName{ann}})
	const timeout = 3 * time.Second
	_, root := mount(t, env, ann, timeout)
	c, err := env.Client(ann)
	check(t, err)
	big := bytes.Repeat([]byte("hung node "), 300000) // Three blocks.
	_, err = c.Put(context.Background(), "ann@example.com/big", bytes.NewReader(big), 0, nil)
	check(t, err)
	if _, err := os.Stat(filepath.Join(root, "queued")); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("stat of a new name: %v", err)
	}

	pid := nodePid(t, env)
	check(t, syscall.Kill(pid, syscall.SIGSTOP))
	stopped := true
	defer func() {
		if stopped {
			syscall.Kill(pid, syscall.SIGCONT)
		}
	}()
	if err := timed(t, "read of a file never read", func() error {
		_, err := os.ReadFile(filepath.Join(root, "big"))
		return err
	}); err == nil {
		t.Fatal("read a file never read with the node hung")
	}
	if err := timed(t, "lookup of a name never looked up", func() error {
		_, err := os.Stat(filepath.Join(root, "never"))
		return err
	}); err == nil {
		t.Fatal("looked up a name with the node hung")
	}
	if err := timed(t, "fsync of a new file", func() error {
		return writeSync(filepath.Join(root, "synced"), []byte("synced"))
	}); err == nil {
		t.Fatal("fsync returned with the node hung")
	}
	var f *os.File
	if err := timed(t, "create of a new file", func() error {
		f, err = os.Create(filepath.Join(root, "queued"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := timed(t, "write of a new file", func() error {
		_, err := f.Write([]byte("queued"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := timed(t, "close of a new file", f.Close); err != nil {
		t.Fatalf("close with the node hung: %v; want the file queued", err)
	}
	// Its put fails, which the next operation on it may report.
	if err := timed(t, "read of the queued file", func() error {
		data, err := os.ReadFile(filepath.Join(root, "queued"))
		if err == nil && string(data) != "queued" {
			t.Errorf("the queued file reads %q", data)
		}
		return err
	}); err != nil && !errors.Is(err, syscall.EIO) {
		t.Fatalf("reading a queued file with the node hung: %v", err)
	}

	check(t, syscall.Kill(pid, syscall.SIGCONT))
	stopped = false
	waitFor(t, "the queued file landing", func() error {
		return sameStored(c, "ann@example.com/queued", []byte("queued"))
	})
	waitFor(t, "reading the big file", func() error {
		data, err := os.ReadFile(filepath.Join(root, "big"))
		if err == nil && !bytes.Equal(data, big) {
			t.Fatal("the big file differs")
		}
		return err
	})
	waitFor(t, "fsync after the node went on", func() error {
		return writeSync(filepath.Join(root, "synced"), []byte("synced"))
	})
	check(t, sameStored(c, "ann@example.com/synced", []byte("synced")))
}
