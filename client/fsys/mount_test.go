package fsys_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"spindle.dev"
	"spindle.dev/client/fsys"
	"spindle.dev/node/nodetest"
)

const (
	ann = spindle.UserName("ann@example.com")
	bob = spindle.UserName("bob@example.com")
)

// canMount skips the test where FUSE cannot be used.
func canMount(t testing.TB) {
	t.Helper()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("no FUSE here (/dev/fuse: %v)", err)
	}
}

// mount mounts the namespace as user u of env, and unmounts it when the
// test ends, lazily if it is busy.
func mount(t testing.TB, env *nodetest.Env, u spindle.UserName, timeout time.Duration) (dir string, root string) {
	t.Helper()
	return mountCache(t, env, u, timeout, t.TempDir())
}

// mountCache mounts as mount does, with the cache (and the staging files)
// in cacheDir.
func mountCache(t testing.TB, env *nodetest.Env, u spindle.UserName, timeout time.Duration, cacheDir string) (dir string, root string) {
	t.Helper()
	canMount(t)
	c, err := env.Client(u)
	if err != nil {
		t.Fatal(err)
	}
	dir = t.TempDir()
	m, err := fsys.Mount(dir, fsys.Config{Client: c, CacheDir: cacheDir, Timeout: timeout, Logger: testLogger(t)})
	if err != nil {
		if errors.Is(err, spindle.IO) {
			t.Skipf("cannot mount here (no privilege?): %v", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Unmount(); err != nil {
			t.Errorf("unmount: %v", err)
		}
	})
	return dir, filepath.Join(dir, string(u))
}

func inproc(t testing.TB, users ...spindle.UserName) *nodetest.Env {
	canMount(t)
	if len(users) == 0 {
		users = []spindle.UserName{ann}
	}
	return nodetest.New(t, nodetest.Setup{Kind: nodetest.InProc, Users: users})
}

func check(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestBasics(t *testing.T) {
	env := inproc(t)
	top, root := mount(t, env, ann, 10*time.Second)
	ents, err := os.ReadDir(top)
	check(t, err)
	if len(ents) != 1 || ents[0].Name() != string(ann) || !ents[0].IsDir() {
		t.Fatalf("root lists %v, want only %s", ents, ann)
	}
	check(t, os.Mkdir(filepath.Join(root, "docs"), 0o755))
	want := bytes.Repeat([]byte("spindle "), 300000) // 2.3 MiB: three blocks.
	check(t, writeSync(filepath.Join(root, "docs/a.txt"), want))
	got, err := os.ReadFile(filepath.Join(root, "docs/a.txt"))
	check(t, err)
	if !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes, want the %d written", len(got), len(want))
	}
	// The client sees what the mount wrote.
	c, _ := env.Client(ann)
	f, err := c.Open(context.Background(), "ann@example.com/docs/a.txt")
	check(t, err)
	if f.Entry().Size != int64(len(want)) {
		t.Fatalf("stored size %d, want %d", f.Entry().Size, len(want))
	}
	f.Close()

	// Random access, and a write in the middle.
	fh, err := os.OpenFile(filepath.Join(root, "docs/a.txt"), os.O_RDWR, 0)
	check(t, err)
	// A file of the mount left open when the test fails would be
	// flushed as the process exits, after its server is gone.
	defer fh.Close()
	buf := make([]byte, 10)
	_, err = fh.ReadAt(buf, 1<<20+3)
	check(t, err)
	if !bytes.Equal(buf, want[1<<20+3:1<<20+13]) {
		t.Fatalf("ReadAt: %q", buf)
	}
	_, err = fh.WriteAt([]byte("XYZ"), 5)
	check(t, err)
	check(t, fh.Sync())
	// Stored once fsync returns, before the file is closed.
	f, err = c.Open(context.Background(), "ann@example.com/docs/a.txt")
	check(t, err)
	head := make([]byte, 8)
	_, err = f.ReadAt(head, 0)
	check(t, err)
	f.Close()
	if string(head) != "spindXYZ" {
		t.Fatalf("stored after fsync: %q", head)
	}
	check(t, fh.Close())
	copy(want[5:], "XYZ")
	got, err = os.ReadFile(filepath.Join(root, "docs/a.txt"))
	check(t, err)
	if !bytes.Equal(got, want) {
		t.Fatalf("after a write in the middle: differs")
	}
	check(t, os.Truncate(filepath.Join(root, "docs/a.txt"), 7))
	got, err = os.ReadFile(filepath.Join(root, "docs/a.txt"))
	check(t, err)
	if string(got) != string(want[:7]) {
		t.Fatalf("after truncate: %q", got)
	}

	// Rename of a file and of a directory, unlink, rmdir.
	check(t, os.Rename(filepath.Join(root, "docs/a.txt"), filepath.Join(root, "docs/b.txt")))
	check(t, os.Rename(filepath.Join(root, "docs"), filepath.Join(root, "papers")))
	got, err = os.ReadFile(filepath.Join(root, "papers/b.txt"))
	check(t, err)
	if string(got) != string(want[:7]) {
		t.Fatalf("after renames: %q", got)
	}
	if _, err := os.Stat(filepath.Join(root, "docs")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("old directory after rename: %v", err)
	}
	if err := os.Remove(filepath.Join(root, "papers")); !errors.Is(err, syscall.ENOTEMPTY) {
		t.Fatalf("rmdir of a full directory: %v, want ENOTEMPTY", err)
	}
	if err := syscall.Unlink(filepath.Join(root, "papers")); !errors.Is(err, syscall.EISDIR) {
		t.Fatalf("unlink of a directory: %v, want EISDIR", err)
	}
	if err := syscall.Rmdir(filepath.Join(root, "papers/b.txt")); !errors.Is(err, syscall.ENOTDIR) {
		t.Fatalf("rmdir of a file: %v, want ENOTDIR", err)
	}
	// Links are symbolic links.
	check(t, os.Symlink("papers/b.txt", filepath.Join(root, "latest")))
	target, err := os.Readlink(filepath.Join(root, "latest"))
	check(t, err)
	if target != "papers/b.txt" {
		t.Fatalf("link target %q", target)
	}
	got, err = os.ReadFile(filepath.Join(root, "latest"))
	check(t, err)
	if string(got) != string(want[:7]) {
		t.Fatalf("through the link: %q", got)
	}
	e, err := c.Lookup(context.Background(), "ann@example.com/latest", false)
	check(t, err)
	if !e.Attr.IsLink() || e.Link != "ann@example.com/papers/b.txt" {
		t.Fatalf("stored link %+v", e)
	}
	check(t, os.Remove(filepath.Join(root, "latest")))
	check(t, os.Remove(filepath.Join(root, "papers/b.txt")))
	check(t, os.Remove(filepath.Join(root, "papers")))
	ents, err = os.ReadDir(root)
	check(t, err)
	if len(ents) != 0 {
		t.Fatalf("root left with %v", ents)
	}
	// Errors.
	if _, err := os.Stat(filepath.Join(root, "nothing")); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("stat of nothing: %v", err)
	}
	if _, err := os.Stat(filepath.Join(top, "carl@example.com")); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("stat of an unknown user: %v", err)
	}
	if err := os.Link(filepath.Join(root, "x"), filepath.Join(root, "y")); err == nil {
		t.Fatal("hard link made")
	}
}

// A DIR mounted already is refused.
func TestMountTwice(t *testing.T) {
	env := inproc(t)
	top, _ := mount(t, env, ann, 10*time.Second)
	c, _ := env.Client(ann)
	_, err := fsys.Mount(top, fsys.Config{Client: c, CacheDir: t.TempDir()})
	if !errors.Is(err, spindle.Exist) || !strings.Contains(err.Error(), top) {
		t.Fatalf("second mount: %v", err)
	}
}

// run runs the command name in dir. The shell changes to dir after it
// has started: a child about to exec is a copy of this process, which
// serves the mount, and one that changed into the mount itself (as
// exec.Cmd.Dir has it do) could deadlock with its parent, which the race
// detector's slowness made happen.
func run(t testing.TB, dir string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command("sh", append([]string{"-c", `cd "$0" && exec "$@"`, dir, name}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// makeTree writes a tree of files of random sizes under dir.
func makeTree(t testing.TB, dir string, rng *rand.Rand, files int) {
	for i := range files {
		sub := filepath.Join(dir, fmt.Sprintf("d%d/e%d", i%3, i%2))
		check(t, os.MkdirAll(sub, 0o755))
		data := make([]byte, rng.Intn(3<<19))
		rng.Read(data)
		check(t, os.WriteFile(filepath.Join(sub, fmt.Sprintf("f%d", i)), data, 0o644))
	}
}

// sameTree fails unless a and b hold the same names with the same bytes.
func sameTree(t testing.TB, a, b string) {
	t.Helper()
	want := readTree(t, a)
	got := readTree(t, b)
	for name, data := range want {
		g, ok := got[name]
		if !ok {
			t.Errorf("%s: missing from %s", name, b)
		} else if g != data {
			t.Errorf("%s: differs (%d bytes, want %d)", name, len(g), len(data))
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("%s: in %s and not in %s", name, b, a)
		}
	}
}

func readTree(t testing.TB, dir string) map[string]string {
	m := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if d.IsDir() {
			m[rel+"/"] = ""
			return nil
		}
		data, err := os.ReadFile(p)
		m[rel] = string(data)
		return err
	})
	check(t, err)
	return m
}

// Standard tools on the mount: cp -r in and out, mv of a directory, tar
// x and tar c.
func TestTools(t *testing.T) {
	env := inproc(t)
	_, root := mount(t, env, ann, 10*time.Second)
	src := filepath.Join(t.TempDir(), "src")
	makeTree(t, src, rand.New(rand.NewSource(1)), 12)
	run(t, root, "cp", "-r", src, filepath.Join(root, "in"))
	sameTree(t, src, filepath.Join(root, "in"))
	run(t, root, "mv", filepath.Join(root, "in"), filepath.Join(root, "moved"))
	out := filepath.Join(t.TempDir(), "out")
	run(t, root, "cp", "-r", filepath.Join(root, "moved"), out)
	sameTree(t, src, out)

	tarball := filepath.Join(t.TempDir(), "t.tar")
	run(t, src, "tar", "cf", tarball, ".")
	check(t, os.Mkdir(filepath.Join(root, "untar"), 0o755))
	run(t, filepath.Join(root, "untar"), "tar", "xf", tarball)
	sameTree(t, src, filepath.Join(root, "untar"))
	tarball2 := filepath.Join(t.TempDir(), "t2.tar")
	run(t, filepath.Join(root, "untar"), "tar", "cf", tarball2, ".")
	back := filepath.Join(t.TempDir(), "back")
	check(t, os.Mkdir(back, 0o755))
	run(t, back, "tar", "xf", tarball2)
	sameTree(t, src, back)
}

// git init and a commit inside the mount.
func TestGit(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git here")
	}
	env := inproc(t)
	_, root := mount(t, env, ann, 10*time.Second)
	repo := filepath.Join(root, "repo")
	check(t, os.Mkdir(repo, 0o755))
	git := func(args ...string) string {
		return run(t, repo, "git", append([]string{"-c", "user.name=Ann", "-c", "user.email=ann@example.com", "-c", "init.defaultBranch=main"}, args...)...)
	}
	git("init")
	check(t, os.WriteFile(filepath.Join(repo, "README"), []byte("hello\n"), 0o644))
	git("add", "README")
	git("commit", "-m", "first")
	check(t, os.WriteFile(filepath.Join(repo, "README"), []byte("hello again\n"), 0o644))
	git("commit", "-am", "second")
	log := git("log", "--format=%s")
	if log != "second\nfirst\n" {
		t.Fatalf("git log: %q", log)
	}
	if st := git("status", "--porcelain"); st != "" {
		t.Fatalf("git status after commit: %q", st)
	}
	git("fsck")
}

// testLogger logs to the test's log when it runs verbosely.
func testLogger(t testing.TB) *slog.Logger {
	if !testing.Verbose() {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(tlog{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tlog struct{ t testing.TB }

func (w tlog) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// Listing another user's root that may not be listed is refused with
// EACCES, not shown as an empty directory.
func TestListPrivateRootIsRefused(t *testing.T) {
	env := inproc(t, ann, bob)
	r := nodetest.NewRunner(context.Background(), env)
	r.As(bob)
	r.Put("bob@example.com/secret.txt", "not for ann")
	if r.Failed() {
		t.Fatal(r.Diag())
	}
	top, _ := mount(t, env, ann, 10*time.Second)
	ents, err := os.ReadDir(filepath.Join(top, string(bob)))
	if !errors.Is(err, syscall.EACCES) {
		t.Fatalf("ls of bob's root: %v, %v; want EACCES", ents, err)
	}
}

// writeSync writes a file, fsyncs it and closes it: it returns when the
// file is stored, or why it was not.
func writeSync(name string, data []byte) error {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
