package fsys_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"spindle.dev"
	"spindle.dev/client"
	"spindle.dev/client/fsys"
	"spindle.dev/node/nodetest"
	"spindle.dev/pack"
)

// helperEnv, set in its environment, makes the test binary a mount
// helper (see mountHelper) rather than run tests: a mount in a process of
// its own, which a test can kill.
const helperEnv = "SPINDLE_FSYS_TEST_MOUNT"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(mountHelper())
	}
	code := m.Run()
	nodetest.RemoveBinary()
	os.Exit(code)
}

// mountHelper mounts, as the user whose keys are in the directory
// $SPINDLE_FSYS_TEST_KEYS and through the node $SPINDLE_FSYS_TEST_NODE,
// on the directory $SPINDLE_FSYS_TEST_MOUNT with its cache in
// $SPINDLE_FSYS_TEST_CACHE; prints "mounted" once it serves, and serves
// until it is killed or unmounted.
func mountHelper() int {
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	keys, err := pack.Load(os.Getenv("SPINDLE_FSYS_TEST_KEYS"))
	if err != nil {
		logger.Error("keys", "err", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, client.Config{Keys: keys, Node: spindle.PeerAddr(os.Getenv("SPINDLE_FSYS_TEST_NODE")), Logger: logger})
	if err != nil {
		logger.Error("dial", "err", err)
		return 1
	}
	m, err := fsys.Mount(os.Getenv(helperEnv), fsys.Config{Client: c, CacheDir: os.Getenv("SPINDLE_FSYS_TEST_CACHE"), Timeout: 5 * time.Second, Logger: logger})
	if err != nil {
		logger.Error("mount", "err", err)
		return 1
	}
	fmt.Println("mounted")
	m.Wait()
	return 0
}

// A helper is a mount in a process of its own.
type helper struct {
	cmd  *exec.Cmd
	dir  string // The mount point.
	root string // The user's tree in it.
	logs *bytes.Buffer
	mu   *sync.Mutex
}

// startHelper mounts env's namespace as ann in a process of its own, with
// its cache in cache, and kills it when the test ends.
func startHelper(t *testing.T, env *nodetest.Env, cache string) *helper {
	t.Helper()
	keys := t.TempDir()
	check(t, env.Keys(ann).Save(keys))
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+dir, "SPINDLE_FSYS_TEST_KEYS="+keys,
		"SPINDLE_FSYS_TEST_NODE="+string(env.Addr()), "SPINDLE_FSYS_TEST_CACHE="+cache)
	h := &helper{cmd: cmd, dir: dir, root: filepath.Join(dir, string(ann)), logs: &bytes.Buffer{}, mu: &sync.Mutex{}}
	out, err := cmd.StdoutPipe()
	check(t, err)
	cmd.Stderr = lockedWriter{h.mu, h.logs}
	check(t, cmd.Start())
	t.Cleanup(func() {
		h.kill()
		if t.Failed() {
			h.mu.Lock()
			t.Logf("mount helper's log:\n%s", h.logs)
			h.mu.Unlock()
		}
	})
	ready := make(chan bool, 1)
	go func() {
		s := bufio.NewScanner(out)
		for s.Scan() {
			if s.Text() == "mounted" {
				ready <- true
			}
		}
		ready <- false
	}()
	select {
	case ok := <-ready:
		if !ok {
			h.kill()
			h.mu.Lock()
			defer h.mu.Unlock()
			t.Fatalf("mount helper ended before it mounted:\n%s", h.logs)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("mount helper did not mount within a minute")
	}
	return h
}

// kill kills the mount's process with SIGKILL, and detaches the dead
// mount it leaves.
func (h *helper) kill() {
	if h.cmd.ProcessState == nil {
		h.cmd.Process.Kill()
		h.cmd.Wait()
	}
	if mounted, _ := fsys.IsMountPoint(h.dir); mounted {
		syscall.Unmount(h.dir, syscall.MNT_DETACH)
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}

// nodePid returns the process id of env's node process.
func nodePid(t *testing.T, env *nodetest.Env) int {
	t.Helper()
	procs, err := filepath.Glob("/proc/[0-9]*/cmdline")
	check(t, err)
	want := "\x00-home\x00" + env.Home + "\x00"
	for _, p := range procs {
		data, err := os.ReadFile(p)
		if err == nil && bytes.Contains(data, []byte(want)) && bytes.Contains(data, []byte("\x00node\x00")) {
			var pid int
			fmt.Sscanf(strings.TrimPrefix(p, "/proc/"), "%d", &pid)
			return pid
		}
	}
	t.Fatal("no node process found")
	return 0
}

// A file fsynced through the mount is stored when fsync returns, so a
// SIGKILL of the mount's process right after loses nothing. A file only
// closed, while the node hangs so that its put cannot land, is kept in
// the staging directory with its journal entry, and the next mount of the
// same cache puts it.
func TestWriteBackSurvivesKill(t *testing.T) {
	canMount(t)
	env := nodetest.New(t, nodetest.Setup{Kind: nodetest.Procs, Users: []spindle.UserName{ann}})
	c, err := env.Client(ann)
	check(t, err)
	cache := t.TempDir()

	h := startHelper(t, env, cache)
	synced := bytes.Repeat([]byte("fsynced "), 100000)
	check(t, writeSync(filepath.Join(h.root, "synced"), synced))
	h.kill()
	if err := sameStored(c, "ann@example.com/synced", synced); err != nil {
		t.Fatalf("a file fsynced before the mount was killed: %v", err)
	}

	h = startHelper(t, env, cache)
	// Known not to exist, so that creating it asks nothing of the node.
	if _, err := os.Stat(filepath.Join(h.root, "closed")); !errors.Is(err, syscall.ENOENT) {
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
	closed := []byte("closed, not fsynced\n")
	err = timed(t, "writing and closing with the node hung", func() error {
		return os.WriteFile(filepath.Join(h.root, "closed"), closed, 0o644)
	})
	if err != nil {
		t.Fatalf("closing a file with the node hung: %v; want it queued", err)
	}
	h.kill()
	journals, _ := filepath.Glob(filepath.Join(cache, "staging", "*.queued"))
	if len(journals) != 1 {
		t.Fatalf("the killed mount left %d journal entries, want 1", len(journals))
	}
	check(t, syscall.Kill(pid, syscall.SIGCONT))
	stopped = false
	if err := sameStored(c, "ann@example.com/closed", nil); !errors.Is(err, spindle.NotExist) {
		t.Fatalf("the closed file before the next mount: %v, want NotExist", err)
	}

	startHelper(t, env, cache)
	waitFor(t, "the next mount putting the closed file", func() error {
		return sameStored(c, "ann@example.com/closed", closed)
	})
	waitFor(t, "the journal entry going", func() error {
		if js, _ := filepath.Glob(filepath.Join(cache, "staging", "*.queued")); len(js) > 0 {
			return fmt.Errorf("%d journal entries left", len(js))
		}
		return nil
	})
}

// A file left by a killed mount whose stored version changed meanwhile is
// put beside it, so that neither is lost.
func TestWriteBackConflictKeepsBoth(t *testing.T) {
	canMount(t)
	env := nodetest.New(t, nodetest.Setup{Kind: nodetest.Procs, Users: []spindle.UserName{ann}})
	c, err := env.Client(ann)
	check(t, err)
	ctx := context.Background()
	_, err = c.Put(ctx, "ann@example.com/f", strings.NewReader("first\n"), 0, nil)
	check(t, err)
	cache := t.TempDir()
	h := startHelper(t, env, cache)
	if data, err := os.ReadFile(filepath.Join(h.root, "f")); err != nil || string(data) != "first\n" {
		t.Fatalf("reading f: %q, %v", data, err)
	}
	pid := nodePid(t, env)
	check(t, syscall.Kill(pid, syscall.SIGSTOP))
	err = timed(t, "writing and closing with the node hung", func() error {
		return os.WriteFile(filepath.Join(h.root, "f"), []byte("mine\n"), 0o644)
	})
	h.kill()
	check(t, syscall.Kill(pid, syscall.SIGCONT))
	check(t, err)
	_, err = c.Put(ctx, "ann@example.com/f", strings.NewReader("theirs\n"), 0, nil)
	check(t, err)
	startHelper(t, env, cache)
	waitFor(t, "the next mount putting the file beside the changed one", func() error {
		return sameStored(c, "ann@example.com/f.conflict-1", []byte("mine\n"))
	})
	check(t, sameStored(c, "ann@example.com/f", []byte("theirs\n")))
}

// Renaming a file over another never leaves the target missing for a
// reader of the mount: one that stats it all the while never gets
// ENOENT. The source is either a file just written (an editor's save,
// whose contents are put at the target in one step) or one stored before.
func TestRenameOverIsAtomic(t *testing.T) {
	env := inproc(t)
	_, root := mount(t, env, ann, 10*time.Second)
	target := filepath.Join(root, "target")
	check(t, writeSync(target, []byte("v0")))
	var stop atomic.Bool
	var stats, missing atomic.Int64
	done := make(chan error, 1)
	go func() {
		for !stop.Load() {
			_, err := os.Stat(target)
			stats.Add(1)
			if errors.Is(err, syscall.ENOENT) {
				missing.Add(1)
			} else if err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	const renames = 40
	for i := range renames {
		src := filepath.Join(root, fmt.Sprintf("tmp%d", i))
		data := []byte(fmt.Sprintf("v%d", i+1))
		if i%2 == 0 {
			check(t, os.WriteFile(src, data, 0o644)) // Queued, not yet put.
		} else {
			check(t, writeSync(src, data)) // Stored.
		}
		check(t, os.Rename(src, target))
		if got, err := os.ReadFile(target); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("rename %d: target reads %q, %v; want %q", i, got, err, data)
		}
	}
	stop.Store(true)
	check(t, <-done)
	t.Logf("%d stats during %d renames over the target", stats.Load(), renames)
	if n := missing.Load(); n > 0 {
		t.Fatalf("the target was missing for %d of %d stats", n, stats.Load())
	}
	c, _ := env.Client(ann)
	waitFor(t, "the last version stored", func() error {
		return sameStored(c, "ann@example.com/target", []byte(fmt.Sprintf("v%d", renames)))
	})
	ents, err := os.ReadDir(root)
	check(t, err)
	if len(ents) != 1 {
		t.Fatalf("the directory lists %v, want only the target", ents)
	}
}
