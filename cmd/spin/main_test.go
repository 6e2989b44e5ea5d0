package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"spindle.dev"
)

// The command line is tested two ways:
//
//   - in-process, by run with a State whose streams are buffers and whose
//     client is a fakeClient (below and in the *_test.go files beside it);
//   - as a real program, by the testscript files in testdata/*.txt, in which
//     "spin" runs this test binary as the spin command (TestMain). Scripts
//     that need a network start real nodes with "spin node".

func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){"spin": main})
}

// TestScript runs the scripts in testdata. Besides testscript's own
// commands they may use
//
//	waitfile FILE [SECONDS]   wait until FILE exists and is not empty (default 60s)
//	envfile VAR FILE          set $VAR to the first line of FILE
//	extract REGEXP FILE       write the first group REGEXP matches in the
//	                          last command's stdout to FILE
//
// and the conditions [node], true when spin node is built in, and [fuse],
// true when spin mount can mount (/dev/fuse, as root). HOME is the
// script's work directory.
func TestScript(t *testing.T) {
	testscript.Run(t, scriptParams("testdata"))
}

// TestVersionsProcesses runs testdata/versions (issue 29) on its own, so
// that .ci/mutations can name it: ann deletes a folder of 50 photos and
// restores it with one command, and bob reads them again.
func TestVersionsProcesses(t *testing.T) {
	testscript.Run(t, scriptParams("testdata/versions"))
}

// scriptParams returns the testscript parameters of the scripts in dir.
func scriptParams(dir string) testscript.Params {
	return testscript.Params{
		Dir: dir,
		Setup: func(env *testscript.Env) error {
			env.Setenv("HOME", env.WorkDir)
			return nil
		},
		Condition: func(cond string) (bool, error) {
			switch cond {
			case "node":
				return runNode != nil, nil
			case "fuse":
				// spin mount mounts by itself only as root.
				_, err := os.Stat("/dev/fuse")
				return err == nil && os.Geteuid() == 0, nil
			}
			return false, fmt.Errorf("unknown condition %q", cond)
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"waitfile": cmdWaitfile,
			"envfile":  cmdEnvfile,
			"extract":  cmdExtract,
		},
	}
}

func cmdWaitfile(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 1 || len(args) > 2 {
		ts.Fatalf("usage: waitfile FILE [SECONDS]")
	}
	limit := 60 * time.Second
	if len(args) == 2 {
		n, err := strconv.Atoi(args[1])
		if err != nil {
			ts.Fatalf("waitfile: bad SECONDS %q", args[1])
		}
		limit = time.Duration(n) * time.Second
	}
	file := ts.MkAbs(args[0])
	deadline := time.Now().Add(limit)
	for {
		if info, err := os.Stat(file); err == nil && info.Size() > 0 {
			return
		}
		if time.Now().After(deadline) {
			ts.Fatalf("waitfile: %s did not appear within %v", file, limit)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func cmdExtract(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: extract REGEXP FILE")
	}
	re, err := regexp.Compile(args[0])
	ts.Check(err)
	m := re.FindStringSubmatch(ts.ReadFile("stdout"))
	if len(m) < 2 {
		ts.Fatalf("extract: no match for %s in stdout", args[0])
	}
	ts.Check(os.WriteFile(ts.MkAbs(args[1]), []byte(m[1]+"\n"), 0o600))
}

func cmdEnvfile(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: envfile VAR FILE")
	}
	data := ts.ReadFile(args[1])
	first, _, _ := strings.Cut(strings.TrimSpace(data), "\n")
	ts.Setenv(args[0], strings.TrimSpace(first))
}

const ann = spindle.UserName("ann@example.com")
const bob = spindle.UserName("bob@example.com")

// An env is a State with a fake client for ann, and a directory for local files.
type env struct {
	t      testing.TB
	client *fakeClient
	st     *State
	dir    string
	stdin  string
	term   bool            // Pretend stdout and stderr are terminals.
	stdout io.Writer       // If set, the commands' stdout instead of a buffer.
	ctx    context.Context // If set, the context commands run in.
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{t: t, client: newFakeClient(ann, bob), dir: t.TempDir()}
	return e
}

// run runs spin with args and returns its stdout, stderr and exit code.
func (e *env) run(args ...string) (stdout, stderr string, code int) {
	e.t.Helper()
	var out, errb bytes.Buffer
	var w io.Writer = &out
	if e.stdout != nil {
		w = e.stdout
	}
	e.st = &State{
		Stdin:  strings.NewReader(e.stdin),
		Stdout: w,
		Stderr: &errb,
		Home:   e.dir,
		Config: &Config{Username: ann, Secrets: filepath.Join(e.dir, "keys")},
		NewClient: func(ctx context.Context, cfg *Config) (spindle.Client, error) {
			return e.client, nil
		},
		isTerminal: func(w io.Writer) bool { return e.term },
		Context:    e.ctx,
	}
	code = run(args, e.st)
	return out.String(), errb.String(), code
}

// ok runs spin and fails the test unless it exits 0 with nothing on stderr.
func (e *env) ok(args ...string) string {
	e.t.Helper()
	out, errs, code := e.run(args...)
	if code != 0 || errs != "" {
		e.t.Fatalf("spin %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, out, errs)
	}
	return out
}

// fails runs spin and checks that it exits with code and prints exactly
// wantErr on stderr.
func (e *env) fails(code int, wantErr string, args ...string) {
	e.t.Helper()
	out, errs, got := e.run(args...)
	if got != code {
		e.t.Errorf("spin %s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), got, code, out, errs)
	}
	if errs != wantErr {
		e.t.Errorf("spin %s: stderr:\n%s\nwant:\n%s", strings.Join(args, " "), errs, wantErr)
	}
}

// file writes a local file under the env's directory and returns its name.
func (e *env) file(name, data string) string {
	e.t.Helper()
	f := filepath.Join(e.dir, name)
	if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
		e.t.Fatal(err)
	}
	if err := os.WriteFile(f, []byte(data), 0o644); err != nil {
		e.t.Fatal(err)
	}
	return f
}

// data returns the contents of a spin file in the fake.
func (e *env) data(name spindle.PathName) (string, bool) {
	e.client.mu.Lock()
	defer e.client.mu.Unlock()
	d, ok := e.client.data[name]
	return string(d), ok
}

func TestHelp(t *testing.T) {
	e := newEnv(t)
	for _, c := range commands() {
		t.Run(c.name, func(t *testing.T) {
			help := e.ok("help", c.name)
			if !strings.HasPrefix(help, "Usage:\n    spin "+c.name) {
				t.Errorf("usage of %s does not start with its synopsis:\n%s", c.name, help)
			}
			for _, want := range []string{"\nOptions:\n", "-help", "\nExample:\n    $ "} {
				if !strings.Contains(help, want) {
					t.Errorf("usage of %s lacks %q:\n%s", c.name, want, help)
				}
			}
			for _, flag := range []string{"-help", "-h"} {
				if got := e.ok(c.name, flag); got != help {
					t.Errorf("spin %s %s printed\n%s\nwant the text of spin help %s:\n%s", c.name, flag, got, c.name, help)
				}
			}
		})
	}
	if got := e.ok("help"); !strings.Contains(got, "    whichaccess   name the Access file") {
		t.Errorf("spin help does not list commands:\n%s", got)
	}
	if got := e.ok("-help"); got != e.ok("help") {
		t.Errorf("spin -help and spin help differ")
	}
}

func TestUsageErrors(t *testing.T) {
	e := newEnv(t)
	e.fails(exitUsage, "spin: put: want SRC and PATH, or a spin PATH alone to read stdin; got 1 argument\n"+putUsage, "put", "x")
	e.fails(exitUsage, "spin: ls: flag provided but not defined: -z\nspin: hint: for the flags of ls, run: spin help ls\n", "ls", "-z", "@")
	e.fails(exitUsage, "spin: put: -packing: unknown packing \"zip\" (want ee, eeintegrity or plain)\n"+putUsage, "put", "-packing", "zip", "a", "@/a")
	e.fails(exitUsage, "spin: unknown command \"frob\"\nspin: hint: run: spin help\n", "frob")
	e.fails(exitUsage, "spin: -log: unknown level \"loud\" (want trace, debug, info, warn or error)\n", "-log", "loud", "ls")
	e.fails(exitUsage, "spin: cp: "+e.dir+"/a and b are both local: one of SRC and DST must be a spin path\n"+cpUsage, "cp", e.dir+"/a", "b")
	e.fails(exitUsage, "spin: help: unknown command \"frob\"\nspin: hint: run: spin help\n", "help", "frob")
	if _, errs, code := e.run(); code != exitUsage || !strings.HasPrefix(errs, "spin: no command given\nUsage:") {
		t.Errorf("spin with no command: exit %d, stderr:\n%s", code, errs)
	}
}

func TestPutGet(t *testing.T) {
	e := newEnv(t)
	src := e.file("report.txt", "quarterly numbers\n")
	e.ok("put", src, "@/report.txt")
	if d, _ := e.data("ann@example.com/report.txt"); d != "quarterly numbers\n" {
		t.Fatalf("stored %q", d)
	}
	if got := e.ok("get", "ann@example.com/report.txt"); got != "quarterly numbers\n" {
		t.Errorf("get to stdout: %q", got)
	}
	if got := e.ok("get", "@/report.txt", "-"); got != "quarterly numbers\n" {
		t.Errorf("get to -: %q", got)
	}

	// Stdin as source, and a packing.
	e.stdin = "from stdin"
	e.ok("put", "-p", "plain", "-", "@/in.txt")
	e.stdin = ""
	if d, _ := e.data("ann@example.com/in.txt"); d != "from stdin" {
		t.Errorf("put - stored %q", d)
	}
	if ent, _ := e.client.Lookup(context.Background(), "ann@example.com/in.txt", false); ent.Packing != spindle.PlainPack {
		t.Errorf("put -p plain stored packing %v", ent.Packing)
	}

	// Get to a file, replacing it, and into a directory.
	dest := e.file("out.txt", "old contents that are longer")
	if err := os.Chmod(dest, 0o600); err != nil {
		t.Fatal(err)
	}
	e.ok("get", "@/report.txt", dest)
	checkFile(t, dest, "quarterly numbers\n")
	if info, _ := os.Stat(dest); info.Mode().Perm() != 0o600 {
		t.Errorf("get changed the mode of %s to %v", dest, info.Mode().Perm())
	}
	sub := filepath.Join(e.dir, "sub")
	os.Mkdir(sub, 0o755)
	e.ok("get", "@/report.txt", sub)
	checkFile(t, filepath.Join(sub, "report.txt"), "quarterly numbers\n")
	if ents, _ := os.ReadDir(sub); len(ents) != 1 {
		t.Errorf("get left temporary files behind: %v", ents)
	}

	// A failed get leaves DEST alone and no temporary file.
	e.fails(exitFailure, "spin: get: ann@example.com/nothing: does not exist\n", "get", "@/nothing", dest)
	checkFile(t, dest, "quarterly numbers\n")

	// Errors on the local side name the local file.
	e.fails(exitFailure, "spin: put: "+e.dir+"/missing: no such file or directory\n", "put", e.dir+"/missing", "@/x")
	e.fails(exitFailure, "spin: put: "+sub+": is a directory\nspin: hint: to copy a directory, use: spin cp -R "+sub+" ann@example.com/x\n", "put", sub, "@/x")
	e.fails(exitFailure, "spin: get: "+e.dir+"/no/such/dir/f: no such file or directory\n", "get", "@/report.txt", e.dir+"/no/such/dir/f")
}

func checkFile(t *testing.T, name, want string) {
	t.Helper()
	got, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Errorf("%s holds %q, want %q", name, got, want)
	}
}

func TestDenials(t *testing.T) {
	e := newEnv(t)
	e.client.entries["bob@example.com/plans.txt"] = &spindle.DirEntry{Name: "bob@example.com/plans.txt", Writer: bob}
	e.fails(exitFailure, "spin: get: bob@example.com/plans.txt: permission denied\nspin: hint: bob@example.com must list you in an Access file\n",
		"get", "bob@example.com/plans.txt")
	e.fails(exitFailure, "spin: get: bob@example.com/hidden: private\nspin: hint: bob@example.com must list you in an Access file\n",
		"get", "bob@example.com/hidden")
	e.fails(exitFailure, "spin: put: bob@example.com/x: permission denied\nspin: hint: bob@example.com must list you in an Access file\n",
		"put", e.file("x", "x"), "bob@example.com/x")
	e.fails(exitFailure, "spin: get: ann@example.com/none: does not exist\n", "get", "@/none")
	e.fails(exitFailure, "spin: ls: ann@example.com/none: does not exist\n", "ls", "@/none")

	// What is readable can be read.
	e.client.readable["bob@example.com/plans.txt"] = true
	e.client.data["bob@example.com/plans.txt"] = []byte("plans")
	if got := e.ok("get", "bob@example.com/plans.txt"); got != "plans" {
		t.Errorf("got %q", got)
	}
}

func TestBadPathNames(t *testing.T) {
	e := newEnv(t)
	e.fails(exitFailure, "spin: ls: docs: not a spin path name: user name has no @\n"+
		"spin: hint: spin path names look like ann@example.com/dir/file, or @/dir/file for your own\n", "ls", "docs")
}

func TestErrorShapes(t *testing.T) {
	for _, tc := range []struct {
		err  error
		path string
		msg  string
	}{
		{spindle.E(spindle.Op("client.Put"), spindle.PathName("ann@example.com/x"), spindle.UserName("bob@example.com"), spindle.Permission), "ann@example.com/x", "permission denied"},
		{spindle.E(spindle.Op("client.Put"), spindle.PathName("a@b.com/x"), spindle.E(spindle.Op("dirlog.Append"), spindle.Invalid, "Access file line 3: bad right \"rread\"")),
			"a@b.com/x", "invalid operation: Access file line 3: bad right \"rread\""},
		{spindle.E(spindle.Op("x"), spindle.Integrity, spindle.PathName("a@b.com/y"), "block bafk...: hash mismatch"), "a@b.com/y", "integrity check failed: block bafk...: hash mismatch"},
		{spindle.NotExist, "", "does not exist"},
		{spindle.E(spindle.Op("client.Rename"), spindle.PathName("a@b.com/old"), spindle.E(spindle.Op("dirlog.Rename"), spindle.Permission, spindle.PathName("a@b.com/new"))),
			"a@b.com/old", "permission denied: a@b.com/new"},
		{&os.PathError{Op: "open", Path: "/tmp/f", Err: os.ErrPermission}, "/tmp/f", "permission denied"},
		// A cause that says the kind itself, as one that came over the
		// wire as text does, is not preceded by the kind again.
		{spindle.E(spindle.Op("client.Get"), spindle.PathName("a@b.com/z"), spindle.IO, errors.New("block b1: I/O error: disk full")), "a@b.com/z", "block b1: I/O error: disk full"},
		{spindle.E(spindle.Integrity, spindle.PathName("a@b.com/z"), errors.New("integrity check failed: head 7 is not signed")), "a@b.com/z", "integrity check failed: head 7 is not signed"},
		{wireTrip(spindle.E(spindle.Op("node.Get"), spindle.IO, spindle.PathName("a@b.com/z"), fmt.Errorf("block b1: %w", spindle.E(spindle.Op("disk.Get"), spindle.IO, "disk full")))), "a@b.com/z", "block b1: disk.Get: I/O error: disk full"},
	} {
		path, msg := describe(tc.err)
		if path != tc.path || msg != tc.msg {
			t.Errorf("describe(%v) = %q, %q; want %q, %q", tc.err, path, msg, tc.path, tc.msg)
		}
	}
}

// wireTrip returns err as a node's client gets it: encoded and decoded.
func wireTrip(err error) error {
	data, _ := err.(*spindle.Error).MarshalBinary()
	return spindle.UnmarshalError(data)
}

func TestLongNameShortened(t *testing.T) {
	e := newEnv(t)
	long := strings.Repeat("a", 10000)
	e.fails(exitFailure, "spin: ls: ann@example.com/"+strings.Repeat("a", 44)+"..."+strings.Repeat("a", 20)+" (10016 characters): does not exist\n", "ls", "@/"+long)
	if got := shorten("x " + strings.Repeat("b", 200) + ": y"); got != "x "+strings.Repeat("b", 200)+": y" {
		t.Errorf("a 200-character word was shortened: %q", got)
	}
}

func TestBinaryToTerminal(t *testing.T) {
	e := newEnv(t)
	e.file("bin", "\x00\x01\x02binary")
	e.ok("put", filepath.Join(e.dir, "bin"), "@/bin")
	e.ok("put", e.file("text", "héllo, wörld\n"), "@/text")
	e.term = true
	e.fails(exitFailure, "spin: get: ann@example.com/bin: refusing to write binary data to a terminal\n"+
		"spin: hint: give a file to write to: spin get ann@example.com/bin FILE\n", "get", "@/bin")
	if got := e.ok("get", "@/text"); got != "héllo, wörld\n" {
		t.Errorf("text to a terminal: %q", got)
	}
	// Not a terminal: anything goes.
	e.term = false
	if got := e.ok("get", "@/bin"); got != "\x00\x01\x02binary" {
		t.Errorf("binary to a pipe: %q", got)
	}
}

func TestTextOnly(t *testing.T) {
	// A rune split between writes passes; invalid UTF-8 does not.
	var b bytes.Buffer
	w := &textOnly{w: &b}
	s := "añb€c"
	for i := range len(s) {
		if _, err := w.Write([]byte{s[i]}); err != nil {
			t.Fatalf("byte %d: %v", i, err)
		}
	}
	if b.String() != s || len(w.tail) != 0 {
		t.Errorf("wrote %q, tail %q", b.String(), w.tail)
	}
	if _, err := w.Write([]byte("ok\xffno")); err != errBinary {
		t.Errorf("invalid UTF-8: err %v", err)
	}
	if _, err := (&textOnly{w: io.Discard}).Write([]byte("a\x00b")); err != errBinary {
		t.Errorf("NUL: err %v", err)
	}
}
