package spindle_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"unsafe"

	"spindle.dev"
)

func readFile(t *testing.T, fsys spindle.FS, name string) (string, error) {
	t.Helper()
	f, err := fsys.OpenFile(name, os.O_RDONLY, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	return string(b), err
}

func writeFile(t *testing.T, fsys spindle.FS, name, data string, sync bool) {
	t.Helper()
	f, err := fsys.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte(data)); err != nil {
		t.Fatal(err)
	}
	if sync {
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// A crash keeps what was synced and nothing else: file contents as of
// the file's last Sync, directory entries as of the directory's last
// SyncDir.
func TestMemFSCrash(t *testing.T) {
	m := spindle.NewMemFS()
	if err := m.MkdirAll("/d", 0o700); err != nil {
		t.Fatal(err)
	}
	m.SyncDir("/")
	writeFile(t, m, "/d/synced", "kept", true)
	writeFile(t, m, "/d/unsynced", "lost", false)
	m.SyncDir("/d")
	writeFile(t, m, "/d/synced", "newer, not synced", false)
	writeFile(t, m, "/d/new-entry", "entry not synced", true)
	if err := m.Rename("/d/unsynced", "/d/renamed"); err != nil {
		t.Fatal(err)
	}
	old, err := m.OpenFile("/d/synced", os.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	m.Crash()

	for name, want := range map[string]string{"/d/synced": "kept", "/d/unsynced": ""} {
		if got, err := readFile(t, m, name); err != nil || got != want {
			t.Errorf("%s after the crash: %q, %v; want %q", name, got, err, want)
		}
	}
	for _, name := range []string{"/d/new-entry", "/d/renamed"} {
		if _, err := m.Stat(name); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s survived the crash without a directory sync: %v", name, err)
		}
	}
	if _, err := old.Read(make([]byte, 1)); !errors.Is(err, spindle.ErrCrashed) {
		t.Errorf("a file opened before the crash reads: %v, want ErrCrashed", err)
	}
}

// CrashAfter fails the operation after the given number of changes, and
// all after it, changing nothing more.
func TestMemFSCrashAfter(t *testing.T) {
	m := spindle.NewMemFS()
	f, err := m.OpenFile("/f", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	start := m.Ops()
	m.CrashAfter(2)
	if _, err := f.Write([]byte("a")); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("b")); !errors.Is(err, spindle.ErrCrashed) {
		t.Fatalf("third change: %v, want ErrCrashed", err)
	}
	if !m.Crashed() || m.Ops() != start+3 {
		t.Fatalf("crashed %v after %d ops", m.Crashed(), m.Ops()-start)
	}
	if err := m.SyncDir("/"); !errors.Is(err, spindle.ErrCrashed) {
		t.Fatalf("change after the crash: %v, want ErrCrashed", err)
	}
	m.Crash()
	// The entry of /f was never synced: the file is gone.
	if _, err := m.Stat("/f"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("/f after the crash: %v", err)
	}
}

// ReplaceFileIn and CreateFileIn with durability survive a crash right
// after they return, on the strict file system; without it, a crash may
// lose the file but never leaves a part of it.
func TestReplaceFileSurvivesCrash(t *testing.T) {
	m := spindle.NewMemFS()
	m.MkdirAll("/home", 0o700)
	m.SyncDir("/")
	if err := spindle.ReplaceFileIn(m, "/home/state", []byte("one"), 0o600, true); err != nil {
		t.Fatal(err)
	}
	if err := spindle.CreateFileIn(m, "/home/key", []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := spindle.ReplaceFileIn(m, "/home/state", []byte("two, not durable"), 0o600, false); err != nil {
		t.Fatal(err)
	}
	m.Crash()
	if got, err := readFile(t, m, "/home/state"); err != nil || got != "one" {
		t.Errorf("state after the crash: %q, %v; want the durable %q", got, err, "one")
	}
	if got, err := readFile(t, m, "/home/key"); err != nil || got != "secret" {
		t.Errorf("key after the crash: %q, %v", got, err)
	}
	des, _ := m.ReadDir("/home")
	if len(des) != 2 {
		t.Errorf("/home holds %d entries after the crash, want 2: no temporary file", len(des))
	}

	// A crash at every step of a durable replace leaves the old or the new
	// contents whole.
	for n := 0; ; n++ {
		m.CrashAfter(n)
		err := spindle.ReplaceFileIn(m, "/home/state", []byte("three"), 0o600, true)
		done := err == nil && !m.Crashed()
		m.Crash()
		got, rerr := readFile(t, m, "/home/state")
		if rerr != nil || (got != "one" && got != "three") || (done && got != "three") {
			t.Fatalf("crash after %d steps (replace returned %v): state is %q, %v", n, err, got, rerr)
		}
		if done {
			break
		}
		if n > 100 {
			t.Fatal("replace never finished")
		}
	}
}

// The strict file system behaves as the machine's for the operations the
// stores use.
func TestMemFSMatchesOS(t *testing.T) {
	for name, fsys := range map[string]spindle.FS{"os": spindle.OS, "mem": spindle.NewMemFS()} {
		t.Run(name, func(t *testing.T) {
			dir := "/x"
			if name == "os" {
				dir = t.TempDir()
			}
			if err := fsys.MkdirAll(dir+"/a/b", 0o700); err != nil {
				t.Fatal(err)
			}
			f, err := fsys.OpenFile(dir+"/a/f", os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := fsys.OpenFile(dir+"/a/f", os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600); !errors.Is(err, fs.ErrExist) {
				t.Errorf("exclusive create of an existing file: %v", err)
			}
			f.WriteAt([]byte("world"), 6)
			f.WriteAt([]byte("hello "), 0)
			buf := make([]byte, 20)
			if n, err := f.ReadAt(buf, 0); n != 11 || err != io.EOF || string(buf[:n]) != "hello world" {
				t.Errorf("ReadAt: %d %v %q", n, err, buf[:n])
			}
			f.Truncate(5)
			if fi, _ := f.Stat(); fi.Size() != 5 {
				t.Errorf("size after truncate: %d", fi.Size())
			}
			f.Seek(0, io.SeekStart)
			if b, _ := io.ReadAll(f); string(b) != "hello" {
				t.Errorf("read after truncate: %q", b)
			}
			f.Close()
			if _, err := f.Write([]byte("x")); err == nil {
				t.Error("write after close succeeded")
			}
			if err := fsys.Link(dir+"/a/f", dir+"/a/g"); err != nil {
				t.Fatal(err)
			}
			if err := fsys.Link(dir+"/a/f", dir+"/a/g"); !errors.Is(err, fs.ErrExist) {
				t.Errorf("link over an existing file: %v", err)
			}
			if err := fsys.Rename(dir+"/a/g", dir+"/a/b/h"); err != nil {
				t.Fatal(err)
			}
			des, err := fsys.ReadDir(dir + "/a")
			if err != nil || len(des) != 2 || des[0].Name() != "b" || !des[0].IsDir() || des[1].Name() != "f" {
				t.Errorf("ReadDir: %v %v", des, err)
			}
			if got, _ := readFile(t, fsys, dir+"/a/b/h"); got != "hello" {
				t.Errorf("linked and renamed file holds %q", got)
			}
			if err := fsys.Remove(dir + "/a"); err == nil {
				t.Error("removed a directory that is not empty")
			}
			if err := fsys.Remove(dir + "/a/f"); err != nil {
				t.Fatal(err)
			}
			if _, err := fsys.Stat(dir + "/a/f"); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("stat of a removed file: %v", err)
			}
			if _, err := fsys.OpenFile(dir+"/a/nope", os.O_RDONLY, 0); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("open of a missing file: %v", err)
			}
			if err := fsys.SyncDir(dir + "/a"); err != nil {
				t.Errorf("SyncDir: %v", err)
			}
		})
	}
}

// alignedBuf returns n bytes whose memory is aligned to DirectAlign.
func alignedBuf(n int) []byte {
	b := make([]byte, n+spindle.DirectAlign)
	off := int(uintptr(unsafe.Pointer(&b[0])) % spindle.DirectAlign)
	if off != 0 {
		off = spindle.DirectAlign - off
	}
	return b[off : off+n : off+n]
}

// Files opened with OpenDirect obey O_DIRECT's alignment rules on a
// MemFS as on Linux: a read or write whose buffer, offset or length is
// misaligned fails with EINVAL, a read at the end of the file returns
// io.EOF. Their data is durable only once synced, as any file's.
func TestOpenDirect(t *testing.T) {
	fss := map[string]spindle.DirectFS{"MemFS": spindle.NewMemFS()}
	osDir := t.TempDir()
	if f, err := spindle.OS.(spindle.DirectFS).OpenDirect(filepath.Join(osDir, "probe"), os.O_WRONLY|os.O_CREATE, 0o600); err == nil {
		f.Close()
		fss["OS"] = spindle.OS.(spindle.DirectFS)
	} else if !errors.Is(err, spindle.ErrNoDirect) {
		t.Fatalf("OpenDirect on the OS: %v, want success or ErrNoDirect", err)
	} else {
		t.Logf("%s refuses direct I/O; testing MemFS alone", osDir)
	}
	for fsName, fsys := range fss {
		t.Run(fsName, func(t *testing.T) {
			name := "/f"
			if fsName == "OS" {
				name = filepath.Join(osDir, "f")
			}
			f, err := fsys.OpenDirect(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			buf := alignedBuf(2 * spindle.DirectAlign)
			for i := range buf {
				buf[i] = byte(i)
			}
			if n, err := f.Write(buf); n != len(buf) || err != nil {
				t.Fatalf("aligned Write: %d, %v", n, err)
			}
			bad := map[string]func() error{
				"write of a misaligned length": func() error { _, err := f.WriteAt(buf[:spindle.DirectAlign-1], 0); return err },
				"write at a misaligned offset": func() error { _, err := f.WriteAt(buf[:spindle.DirectAlign], 100); return err },
				"write from misaligned memory": func() error { _, err := f.WriteAt(buf[1:spindle.DirectAlign+1], 0); return err },
				"read of a misaligned length":  func() error { _, err := f.ReadAt(buf[:100], 0); return err },
				"read into misaligned memory":  func() error { _, err := f.ReadAt(buf[1:spindle.DirectAlign+1], 0); return err },
			}
			for what, op := range bad {
				if err := op(); !errors.Is(err, syscall.EINVAL) {
					t.Errorf("%s: %v, want EINVAL", what, err)
				}
			}
			if err := f.Truncate(5000); err != nil {
				t.Fatal(err)
			}
			if err := f.Sync(); err != nil {
				t.Fatal(err)
			}
			got := alignedBuf(3 * spindle.DirectAlign)
			n, err := f.ReadAt(got, 0)
			if n != 5000 || err != io.EOF || !bytes.Equal(got[:n], buf[:n]) {
				t.Fatalf("aligned ReadAt of a 5000-byte file: %d, %v (equal %v)", n, err, bytes.Equal(got[:n], buf[:n]))
			}
			if n, err := f.ReadAt(got[:spindle.DirectAlign], 5000); n != 0 || err != io.EOF {
				t.Fatalf("ReadAt the end of the file: %d, %v, want io.EOF", n, err)
			}
		})
	}

	// Direct writes are lost at a crash unless synced.
	m := spindle.NewMemFS()
	for _, sync := range []bool{true, false} {
		name := fmt.Sprintf("/sync-%v", sync)
		f, err := m.OpenDirect(name, os.O_WRONLY|os.O_CREATE, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write(alignedBuf(spindle.DirectAlign)); err != nil {
			t.Fatal(err)
		}
		if sync {
			f.Sync()
		}
		f.Close()
	}
	m.SyncDir("/")
	m.Crash()
	for name, want := range map[string]int64{"/sync-true": spindle.DirectAlign, "/sync-false": 0} {
		if fi, err := m.Stat(name); err != nil || fi.Size() != want {
			t.Errorf("after a crash, %s: %v, %v, want %d bytes", name, fi, err, want)
		}
	}
}
