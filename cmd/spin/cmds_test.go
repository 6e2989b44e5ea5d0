package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"spindle.dev"
	"spindle.dev/pack"
)

// tree returns the local files below dir as relative name → contents, with
// directories as name/ → "".
func tree(t testing.TB, dir string) map[string]string {
	t.Helper()
	m := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if d.IsDir() {
			m[rel+"/"] = ""
			return nil
		}
		b, err := os.ReadFile(p)
		m[rel] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// spinTree returns the fake's entries below dir in the same form as tree.
func (e *env) spinTree(dir spindle.PathName) map[string]string {
	e.client.mu.Lock()
	defer e.client.mu.Unlock()
	m := map[string]string{}
	prefix := strings.TrimSuffix(string(dir), "/")
	for name, ent := range e.client.entries {
		if string(name) != prefix && !strings.HasPrefix(string(name), prefix+"/") {
			continue
		}
		rel := strings.TrimPrefix(strings.TrimPrefix(string(name), prefix), "/")
		if rel == "" {
			rel = "."
		}
		if ent.Attr.IsDir() {
			m[rel+"/"] = ""
		} else {
			m[rel] = string(e.client.data[name])
		}
	}
	return m
}

func sameTree(t testing.TB, what string, got, want map[string]string) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("%s:\n got %v\nwant %v", what, got, want)
	}
}

func TestCpRecursive(t *testing.T) {
	e := newEnv(t)
	e.file("photos/a.jpg", "A")
	e.file("photos/2026/b.jpg", "BB")
	e.file("photos/2026/summer/c.jpg", "CCC")
	os.MkdirAll(filepath.Join(e.dir, "photos/empty"), 0o755)
	local := filepath.Join(e.dir, "photos")
	want := tree(t, local)

	// Without -R a directory is refused.
	e.fails(exitFailure, "spin: cp: "+local+": is a directory\nspin: hint: to copy a directory, use: spin cp -R "+local+" ann@example.com/photos\n",
		"cp", local, "@/photos")

	// Local to spin: DST does not exist, so it becomes the copy.
	e.ok("cp", "-R", local, "@/photos")
	sameTree(t, "local→spin", e.spinTree("ann@example.com/photos"), want)

	// Again into an existing directory: the copy goes inside it.
	e.ok("mkdir", "@/backup")
	e.ok("cp", "-R", local, "@/backup")
	sameTree(t, "local→spin into a directory", e.spinTree("ann@example.com/backup/photos"), want)

	// Spin to spin.
	e.ok("cp", "-R", "@/photos", "ann@example.com/copy")
	sameTree(t, "spin→spin", e.spinTree("ann@example.com/copy"), want)

	// Spin to local.
	back := filepath.Join(e.dir, "back")
	e.ok("cp", "-R", "@/photos", back)
	sameTree(t, "spin→local", tree(t, back), want)

	// Several sources into a local directory.
	multi := filepath.Join(e.dir, "multi")
	os.Mkdir(multi, 0o755)
	e.ok("cp", "@/photos/a.jpg", "@/photos/2026/b.jpg", multi)
	sameTree(t, "several files", tree(t, multi), map[string]string{"./": "", "a.jpg": "A", "b.jpg": "BB"})

	// Several sources need a directory.
	e.fails(exitFailure, "spin: cp: ann@example.com/nodir: not a directory\nspin: hint: to copy several files, DST must be an existing directory\n",
		"cp", "@/photos/a.jpg", "@/photos/2026/b.jpg", "@/nodir")
}

func TestCpErrorsContinue(t *testing.T) {
	e := newEnv(t)
	e.file("d/a", "a")
	e.file("d/b", "b")
	dir := filepath.Join(e.dir, "d")
	// bob's tree refuses every write: each failure is reported and cp exits 1.
	e.client.entries["bob@example.com/in"] = &spindle.DirEntry{Name: "bob@example.com/in", Attr: spindle.AttrDirectory}
	_, errs, code := e.run("cp", filepath.Join(dir, "a"), filepath.Join(dir, "b"), "ann@example.com/missing/")
	if code != exitFailure || !strings.Contains(errs, "not a directory") {
		t.Errorf("exit %d, stderr:\n%s", code, errs)
	}
	// bob's tree is private to ann, so whether DST exists is unknown; the
	// directory cannot be made, and so the files in it are not tried.
	_, errs, code = e.run("cp", "-R", dir, "bob@example.com/d")
	if code != exitFailure || errs != "spin: cp: bob@example.com/d: permission denied\nspin: hint: bob@example.com must list you in an Access file\n" {
		t.Errorf("exit %d, stderr:\n%s", code, errs)
	}
}

func TestCpConcurrent(t *testing.T) {
	e := newEnv(t)
	const n = 64
	for i := range n {
		e.file(fmt.Sprintf("many/f%03d", i), strings.Repeat("x", 4096))
	}
	e.client.putDelay = 5 * time.Millisecond
	start := time.Now()
	e.ok("cp", "-R", filepath.Join(e.dir, "many"), "@/many")
	elapsed := time.Since(start)
	if e.client.puts != n {
		t.Errorf("%d puts, want %d", e.client.puts, n)
	}
	if e.client.maxPuts < 2 || e.client.maxPuts > cpWorkers {
		t.Errorf("at most %d puts in flight, want 2 to %d", e.client.maxPuts, cpWorkers)
	}
	t.Logf("%d files with %v per put: %v, %d in flight at most", n, e.client.putDelay, elapsed, e.client.maxPuts)

	e.client.maxPuts = 0
	e.ok("cp", "-j", "1", "-R", filepath.Join(e.dir, "many"), "@/one")
	if e.client.maxPuts != 1 {
		t.Errorf("cp -j 1: %d puts in flight at most", e.client.maxPuts)
	}
	e.fails(exitUsage, "spin: cp: -jobs: want 1 to 256 files at once, not 0\n"+cpUsage, "cp", "-j", "0", "a", "@/a")
}

func TestLs(t *testing.T) {
	e := newEnv(t)
	e.ok("mkdir", "@/docs")
	e.ok("put", e.file("a", "hello"), "@/docs/a.txt")
	e.ok("put", "-packing", "plain", e.file("b", "hi"), "@/b.txt")
	e.ok("link", "@/docs/a.txt", "@/ln")
	e.ok("mkdir", "@/docs/sub")
	e.ok("put", e.file("c", "c"), "@/docs/sub/c")

	if got, want := e.ok("ls"), "ann@example.com/b.txt\nann@example.com/docs/\nann@example.com/ln\n"; got != want {
		t.Errorf("ls:\n%s\nwant:\n%s", got, want)
	}
	if got := e.ok("ls", "@"); got != e.ok("ls", "ann@example.com") {
		t.Errorf("ls @ differs from ls ann@example.com")
	}
	if got, want := e.ok("ls", "-R", "@/docs"), "ann@example.com/docs/a.txt\nann@example.com/docs/sub/\nann@example.com/docs/sub/c\n"; got != want {
		t.Errorf("ls -R:\n%s\nwant:\n%s", got, want)
	}
	if got, want := e.ok("ls", "@/*.txt"), "ann@example.com/b.txt\n"; got != want {
		t.Errorf("ls glob:\n%s\nwant:\n%s", got, want)
	}
	when := formatTime(spindle.Time(time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC).UnixNano()))
	want := strings.Join([]string{
		"- plain 2 " + when + " ann@example.com ann@example.com/b.txt",
		"d -     0 " + when + " ann@example.com ann@example.com/docs/",
		"l -     0 " + when + " ann@example.com ann@example.com/ln -> ann@example.com/docs/a.txt",
		""}, "\n")
	if got := e.ok("ls", "-l", "@"); got != want {
		t.Errorf("ls -l:\n%s\nwant:\n%s", got, want)
	}
	// A missing name is reported, and the others still listed.
	out, errs, code := e.run("ls", "@/nope", "@/b.txt")
	if code != exitFailure || out != "ann@example.com/b.txt\n" || errs != "spin: ls: ann@example.com/nope: does not exist\n" {
		t.Errorf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
}

func TestMkdirRm(t *testing.T) {
	e := newEnv(t)
	e.fails(exitFailure, "spin: mkdir: ann@example.com/a/b: does not exist\n", "mkdir", "@/a/b/c")
	e.ok("mkdir", "-p", "@/a/b/c")
	e.ok("mkdir", "-p", "@/a/b/c") // Existing directories are fine with -p.
	e.fails(exitFailure, "spin: mkdir: ann@example.com/a/b: already exists\n", "mkdir", "@/a/b")
	e.ok("put", e.file("f", "f"), "@/a/f")
	e.fails(exitFailure, "spin: mkdir: ann@example.com/a/f: not a directory\n", "mkdir", "-p", "@/a/f/g")
	sameTree(t, "after mkdir", e.spinTree("ann@example.com/a"), map[string]string{"./": "", "b/": "", "b/c/": "", "f": "f"})

	e.fails(exitFailure, "spin: rm: ann@example.com/a: directory not empty\nspin: hint: to remove a directory and everything in it, use: spin rm -R ann@example.com/a\n", "rm", "@/a")
	e.ok("rm", "@/a/f")
	e.ok("rm", "-R", "@/a")
	if m := e.spinTree("ann@example.com/a"); len(m) != 0 {
		t.Errorf("left after rm -R: %v", m)
	}
	e.fails(exitFailure, "spin: rm: ann@example.com/a: does not exist\n", "rm", "@/a")
}

func TestMvLink(t *testing.T) {
	e := newEnv(t)
	e.ok("mkdir", "-p", "@/drafts/old")
	e.ok("put", e.file("x", "x"), "@/drafts/old/x")
	e.ok("mkdir", "@/docs")
	e.ok("mv", "@/drafts", "@/docs") // Into an existing directory.
	sameTree(t, "after mv", e.spinTree("ann@example.com/docs"), map[string]string{"./": "", "drafts/": "", "drafts/old/": "", "drafts/old/x": "x"})
	e.ok("mv", "@/docs/drafts/old/x", "@/docs/y")
	if d, ok := e.data("ann@example.com/docs/y"); !ok || d != "x" {
		t.Errorf("after mv of a file: %q %v", d, ok)
	}
	e.fails(exitFailure, "spin: mv: ann@example.com/nothing: does not exist\n", "mv", "@/nothing", "@/else")

	e.ok("link", "@/docs/y", "@/l")
	if got := e.ok("get", "@/l"); got != "x" {
		t.Errorf("get through a link: %q", got)
	}
	e.fails(exitUsage, "spin: link: want TARGET and PATH, got 1 argument\n"+linkUsage, "link", "@/l")
}

func TestWhichaccessInfo(t *testing.T) {
	e := newEnv(t)
	e.ok("mkdir", "@/docs")
	e.ok("put", e.file("r", "report"), "@/docs/r")
	if got, want := e.ok("whichaccess", "@/docs/r"), "ann@example.com/docs/r: no Access file: only ann@example.com has access\n"; got != want {
		t.Errorf("whichaccess: %q, want %q", got, want)
	}
	e.stdin = "read: bob@example.com\n*: ann@example.com\n"
	e.ok("put", "-", "@/Access")
	if got, want := e.ok("whichaccess", "@/docs/r"), "ann@example.com/Access\n"; got != want {
		t.Errorf("whichaccess: %q, want %q", got, want)
	}
	got := e.ok("info", "@/docs/r")
	for _, want := range []string{
		"name:     ann@example.com/docs/r\n",
		"kind:     file\n",
		"writer:   ann@example.com\n",
		"packing:  ee\n",
		"size:     6\n",
		"sequence: 2\n",
		"blocks:   1\n          0: bafkfake offset 0 size 6\n",
		"readers:  ann@example.com\n",
		"access:   ann@example.com/Access\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("info lacks %q:\n%s", want, got)
		}
	}
}

func TestShare(t *testing.T) {
	e := newEnv(t)
	e.client.shares = []spindle.ShareReport{
		{Name: "ann@example.com/docs/a", Readers: []spindle.UserName{ann, bob}, Wrapped: []spindle.UserName{ann, bob}},
		{Name: "ann@example.com/docs/b", Readers: []spindle.UserName{ann, bob}, Wrapped: []spindle.UserName{ann, "carl@example.com"}, Missing: []spindle.UserName{bob}, Extra: []spindle.UserName{"carl@example.com"}},
	}
	out, errs, code := e.run("share", "-R", "@/docs")
	wantOut := "ann@example.com/docs/a: ok; readers: ann@example.com, bob@example.com\n" +
		"ann@example.com/docs/b: needs fixing; readers: ann@example.com, bob@example.com; missing keys: bob@example.com; extra keys: carl@example.com\n"
	if code != 0 || out != wantOut || errs != "spin: hint: 1 file needs new keys; to repair them, run: spin share -fix -R @/docs\n" {
		t.Errorf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	if got := e.ok("share", "-fix", "-R", "@/docs"); !strings.Contains(got, "docs/b: fixed; readers: ann@example.com, bob@example.com; added keys: bob@example.com; removed keys: carl@example.com\n") {
		t.Errorf("share -fix:\n%s", got)
	}
}

// What share says of all, and of groups it cannot load, is true.
func TestShareAllAndGroups(t *testing.T) {
	e := newEnv(t)
	all := spindle.AllUsers
	e.client.shares = []spindle.ShareReport{
		{Name: "ann@example.com/pub/a", Readers: []spindle.UserName{all, ann}, Wrapped: []spindle.UserName{all, ann}},
		{Name: "ann@example.com/pub/b", Readers: []spindle.UserName{all, ann}, Wrapped: []spindle.UserName{ann}, Missing: []spindle.UserName{all}},
		{Name: "ann@example.com/grp/c", Readers: []spindle.UserName{ann}, Wrapped: []spindle.UserName{ann, bob},
			Groups: []error{spindle.E(spindle.PathName("carl@other.org/Group/mates"), spindle.Private)}, Unsure: []spindle.UserName{bob}},
	}
	out, _, code := e.run("share", "-R", "@")
	want := "ann@example.com/pub/a: ok; readers: all (key wrapped for all), ann@example.com\n" +
		"ann@example.com/pub/b: needs fixing; readers: all, ann@example.com; missing keys: all\n" +
		"ann@example.com/grp/c: readers not all known; readers: ann@example.com; group carl@other.org/Group/mates: private; keys kept while a group cannot be read: bob@example.com\n"
	if code != 0 || out != want {
		t.Errorf("exit %d\nstdout:\n%s\nwant:\n%s", code, out, want)
	}
	// A file that could not be checked fails the command, after the others.
	e.client.shares[0].Err = spindle.E(spindle.PathName("ann@example.com/pub/a"), spindle.CannotDecrypt)
	out, errs, code := e.run("share", "-R", "@")
	if code != exitFailure || !strings.HasPrefix(out, "ann@example.com/pub/a: failed;") || !strings.Contains(out, "grp/c") ||
		!strings.HasPrefix(errs, "spin: share: ann@example.com/pub/a: cannot decrypt") {
		t.Errorf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
}

// A put that took effect but could not do everything warns and exits 0.
func TestPutWarning(t *testing.T) {
	e := newEnv(t)
	e.client.putWarn = &spindle.Warning{Problems: []error{spindle.E(spindle.PathName("ann@example.com/Group/ghost"), spindle.NotExist, "group named by ann@example.com/Access: until it exists it grants nothing")}}
	_, errs, code := e.run("put", e.file("acc", "r: ghost\n*: ann@example.com\n"), "@/Access")
	if code != 0 || errs != "spin: put: warning: ann@example.com/Group/ghost: does not exist: group named by ann@example.com/Access: until it exists it grants nothing\n" {
		t.Errorf("exit %d, stderr:\n%s", code, errs)
	}
	if d, ok := e.data("ann@example.com/Access"); !ok || d != "r: ghost\n*: ann@example.com\n" {
		t.Errorf("stored %q, %v", d, ok)
	}
}

func TestWatch(t *testing.T) {
	e := newEnv(t)
	e.ok("mkdir", "@/in")
	e.ok("put", e.file("a", "a"), "@/in/a")
	e.ok("link", "@/in/a", "@/in/l")
	e.ok("rm", "@/in/a")
	want := "1 mkdir ann@example.com/in ann@example.com\n" +
		"2 put ann@example.com/in/a ann@example.com\n" +
		"3 link ann@example.com/in/l ann@example.com\n" +
		"4 delete ann@example.com/in/a ann@example.com\n"
	if got := e.ok("watch", "-from", "1", "@/in"); got != want {
		t.Errorf("watch -from 1:\n%s\nwant:\n%s", got, want)
	}
	want = "1 mkdir ann@example.com/in ann@example.com\n" +
		"3 link ann@example.com/in/l ann@example.com\n"
	if got := e.ok("watch", "@/in"); got != want {
		t.Errorf("watch (current state):\n%s\nwant:\n%s", got, want)
	}
	if got := e.ok("watch", "-new", "@/in"); got != "" {
		t.Errorf("watch -new printed old changes:\n%s", got)
	}
	e.fails(exitUsage, "spin: watch: -from: sequence numbers start at 1\n"+watchUsage, "watch", "-from", "0", "@")
	if got := e.ok("watch", "-from", "3", "@/in"); got != "3 link ann@example.com/in/l ann@example.com\n4 delete ann@example.com/in/a ann@example.com\n" {
		t.Errorf("watch -from 3:\n%s", got)
	}
	e.fails(exitUsage, "spin: watch: -new and -from exclude each other\n"+watchUsage, "watch", "-new", "-from", "2", "@")
}

func TestUserSignup(t *testing.T) {
	e := newEnv(t)
	want := "name:      bob@example.com\nkey:       p256:key-of-bob@example.com\ndir host:  /ip4/127.0.0.1/tcp/4242/p2p/12D3KooWfake\n"
	if got := e.ok("user", "bob@Example.COM"); got != want {
		t.Errorf("user:\n%s\nwant:\n%s", got, want)
	}
	if got := e.ok("user"); !strings.HasPrefix(got, "name:      ann@example.com\n") {
		t.Errorf("user with no name:\n%s", got)
	}
	e.fails(exitFailure, "spin: user: carl@example.com: does not exist\n", "user", "carl@example.com")
	e.fails(exitFailure, "spin: user: carl: not a user name: invalid operation: user name has no @\n", "user", "carl")
	if got := e.ok("signup"); !strings.HasPrefix(got, "name:      ann@example.com\n") || !e.client.signedUp {
		t.Errorf("signup printed\n%s\nsigned up: %v", got, e.client.signedUp)
	}
	if e.client.closed == 0 {
		t.Errorf("the client was not closed")
	}
}

func TestNotBuiltIn(t *testing.T) {
	saved := runNode
	runNode = nil
	t.Cleanup(func() { runNode = saved })
	e := newEnv(t)
	e.fails(exitFailure, "spin: node: spin node is not built in\n", "node", "-home", e.dir)
	e.fails(exitFailure, "spin: demo: spin demo needs spin node, which is not built in\n", "demo")
	e.client = nil
	var out, errs strings.Builder
	st := &State{Stdout: &out, Stderr: &errs, Config: &Config{Username: ann, Secrets: e.dir}}
	if code := run([]string{"ls", "@"}, st); code != exitFailure || errs.String() != "spin: ls: no network client built in\n" {
		t.Errorf("exit %d, stderr:\n%s", code, errs.String())
	}
}

func TestConfig(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ text, err string }{
		{"username: ann@example.com\nsecrets: keys\n", ""},
		{"username: [ann\n", "malformed YAML: yaml: line 1: did not find expected ',' or ']'"},
		{"username: ann@example.com\nsecrets: keys\ncolour: blue\n", "malformed YAML: line 3: unknown field colour"},
		{"secrets: keys\n", "no username"},
		{"username: ann\nsecrets: keys\n", `username "ann": invalid operation: user name has no @`},
		{"username: ann@example.com\nsecrets: keys\npacking: zip\n", `packing: invalid operation: unknown packing "zip" (want ee, eeintegrity or plain)`},
		{"username: ann@example.com\n", "no secrets directory"},
	} {
		f := filepath.Join(dir, "config")
		os.WriteFile(f, []byte(tc.text), 0o644)
		cfg, err := ReadConfig(f)
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%q: %v", tc.text, err)
		case tc.err != "" && (err == nil || err.Error() != tc.err):
			t.Errorf("%q: error %v, want %s", tc.text, err, tc.err)
		case err == nil && cfg.Secrets != filepath.Join(dir, "keys"):
			t.Errorf("%q: secrets %q, want it made absolute", tc.text, cfg.Secrets)
		}
	}

	// A command that needs the config says what is wrong and what to do.
	var out, errs strings.Builder
	st := &State{Stdout: &out, Stderr: &errs, ConfigFile: filepath.Join(dir, "config")}
	if code := run([]string{"ls"}, st); code != exitFailure || errs.String() != "spin: cannot read config "+filepath.Join(dir, "config")+": no secrets directory\n"+
		"spin: hint: fix the file, or run: spin -config "+filepath.Join(dir, "config")+" init -force USER to make a new one\n" {
		t.Errorf("exit %d, stderr:\n%s", code, errs.String())
	}
}

func TestInit(t *testing.T) {
	home := t.TempDir()
	os.MkdirAll(filepath.Join(home, "spin", "node"), 0o700)
	os.WriteFile(filepath.Join(home, "spin", "node", "addr"), []byte("/ip4/127.0.0.1/tcp/4242/p2p/12D3KooWnode\n/ip4/127.0.0.1/udp/4242/quic-v1/p2p/12D3KooWnode\n"), 0o644)
	initRun := func(stdin string, args ...string) (string, string, int) {
		var out, errs strings.Builder
		st := &State{Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errs, Home: home}
		code := run(args, st)
		return out.String(), errs.String(), code
	}
	out, errs, code := initRun("", "init", "ann@Example.COM")
	if code != 0 || errs != "" {
		t.Fatalf("init: exit %d\n%s\n%s", code, out, errs)
	}
	cfg, err := ReadConfig(filepath.Join(home, "spin", "config"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Username != ann || cfg.Node != "/ip4/127.0.0.1/tcp/4242/p2p/12D3KooWnode" || len(cfg.Keyserver) != 1 || cfg.Keyserver[0] != cfg.Node ||
		cfg.Packing != "ee" || cfg.Secrets != filepath.Join(home, "spin", "keys") {
		t.Errorf("config: %+v", cfg)
	}
	keys, err := pack.Load(cfg.Secrets)
	if err != nil {
		t.Fatal(err)
	}
	if info, _ := os.Stat(filepath.Join(cfg.Secrets, pack.PrivateKeyFile)); info.Mode().Perm() != 0o600 {
		t.Errorf("private key has mode %v", info.Mode().Perm())
	}
	// The secret is printed once, indented on a line of its own.
	var secret string
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "    ") {
			secret = strings.TrimSpace(line)
		}
	}
	if _, err := pack.ParseSecret(secret); err != nil {
		t.Fatalf("no recovery secret in:\n%s", out)
	}

	// A second init does not replace the keys.
	_, errs, code = initRun("", "init", "ann@example.com")
	if code != exitFailure || !strings.Contains(errs, "config already exists") {
		t.Errorf("second init: exit %d\n%s", code, errs)
	}

	// -recover re-creates the same key from the secret on stdin.
	os.RemoveAll(filepath.Join(home, "spin", "keys"))
	_, errs, code = initRun(strings.ToUpper(secret)+"\n", "init", "-force", "-recover", "-node", "/ip4/192.0.2.1/tcp/1/p2p/12D3KooWother", "-keyserver", "/ip4/192.0.2.2/tcp/1/p2p/a, /ip4/192.0.2.3/tcp/1/p2p/b", "-packing", "eeintegrity", "ann@example.com")
	if code != 0 {
		t.Fatalf("init -recover: exit %d\n%s", code, errs)
	}
	again, err := pack.Load(cfg.Secrets)
	if err != nil {
		t.Fatal(err)
	}
	if again.PublicKey() != keys.PublicKey() {
		t.Errorf("recovered key %s, want %s", again.PublicKey(), keys.PublicKey())
	}
	cfg, _ = ReadConfig(filepath.Join(home, "spin", "config"))
	if got := fmt.Sprint(cfg.Keyserver); cfg.Node != "/ip4/192.0.2.1/tcp/1/p2p/12D3KooWother" || got != "[/ip4/192.0.2.2/tcp/1/p2p/a /ip4/192.0.2.3/tcp/1/p2p/b]" || cfg.Packing != "eeintegrity" {
		t.Errorf("config after -recover: %+v", cfg)
	}

	// A malformed secret is refused and nothing is written.
	_, errs, code = initRun("not a secret\n", "init", "-force", "-recover", "ann@example.com")
	if code != exitFailure || !strings.HasPrefix(errs, "spin: init: recovery secret: invalid operation: recovery secret character") {
		t.Errorf("bad secret: exit %d\n%s", code, errs)
	}
	_, errs, code = initRun("", "init", "-force", "-recover", "ann@example.com")
	if code != exitFailure || errs != "spin: init: recovery secret: no secret on stdin\n" {
		t.Errorf("no secret: exit %d\n%s", code, errs)
	}
	_, errs, code = initRun("", "init", "ann")
	if code != exitFailure || errs != "spin: init: ann: not a user name: user name has no @\n" {
		t.Errorf("bad user: exit %d\n%s", code, errs)
	}
}

func TestCheckRecovered(t *testing.T) {
	// A recovered key that is not the registered one is refused.
	home := t.TempDir()
	fake := newFakeClient(ann)
	st := &State{Stdin: strings.NewReader(""), Stdout: new(strings.Builder), Stderr: new(strings.Builder), Home: home,
		NewClient: func(ctx context.Context, cfg *Config) (spindle.Client, error) {
			if _, err := pack.Load(cfg.Secrets); err != nil {
				return nil, err
			}
			return fake, nil
		}}
	_, secret, err := pack.Generate(ann)
	if err != nil {
		t.Fatal(err)
	}
	st.Stdin = strings.NewReader(secret.String() + "\n")
	if code := run([]string{"init", "-recover", "-node", "/ip4/127.0.0.1/tcp/1/p2p/x", "ann@example.com"}, st); code != exitFailure {
		t.Fatalf("exit %d\n%s", code, st.Stderr)
	}
	if got := st.Stderr.(*strings.Builder).String(); got != "spin: init: recovery secret: the key it makes is not the key registered for ann@example.com\nspin: hint: check the secret for typing mistakes; nothing was written\n" {
		t.Errorf("stderr:\n%s", got)
	}
	if _, err := os.Stat(filepath.Join(home, "spin", "config")); err == nil {
		t.Errorf("config written after a wrong secret")
	}
	// The registered key matches: accepted.
	keys, _ := pack.FromSecret(ann, secret)
	fake.users[ann].PublicKey = keys.PublicKey()
	st.Stdin = strings.NewReader(secret.String() + "\n")
	st.Stderr = new(strings.Builder)
	if code := run([]string{"init", "-recover", "-node", "/ip4/127.0.0.1/tcp/1/p2p/x", "ann@example.com"}, st); code != 0 {
		t.Fatalf("exit %d\n%s", code, st.Stderr)
	}
}

func TestFlagAfterArguments(t *testing.T) {
	e := newEnv(t)
	e.fails(exitUsage, "spin: ls: flag -l must come before the arguments\n"+lsUsage, "ls", "@", "-l")
	e.fails(exitUsage, "spin: put: flag -packing=plain must come before the arguments\n"+putUsage, "put", "a", "@/a", "-packing=plain")
	// After --, a name may start with -.
	e.file("-l", "dash")
	_, errs, _ := e.run("put", "--", "-l", "@/dash")
	if !strings.Contains(errs, "-l: no such file") {
		t.Errorf("put -- -l: %s", errs) // Relative to the test's directory, not e.dir.
	}
}

func TestProgress(t *testing.T) {
	e := newEnv(t)
	big := e.file("big", strings.Repeat("x", progressMin+1))
	small := e.file("small", "x")
	_, errs, _ := e.run("put", big, "@/big")
	if errs != "" {
		t.Errorf("progress drawn when stderr is not a terminal:\n%q", errs)
	}
	e.term = true
	if _, errs, _ = e.run("put", small, "@/small"); errs != "" {
		t.Errorf("progress drawn for a small file:\n%q", errs)
	}
	_, errs, code := e.run("put", big, "@/big")
	if code != 0 || !strings.Contains(errs, "put big") || !strings.Contains(errs, "100%") || !strings.Contains(errs, "MiB") {
		t.Errorf("no progress bar on a terminal: exit %d, stderr %q", code, errs)
	}
	dest := filepath.Join(e.dir, "big.out")
	_, errs, _ = e.run("get", "@/big", dest)
	if !strings.Contains(errs, "get big") || !strings.Contains(errs, "100%") {
		t.Errorf("no progress bar for get: %q", errs)
	}
	checkFile(t, dest, strings.Repeat("x", progressMin+1))
}

func TestRmManyFiles(t *testing.T) {
	e := newEnv(t)
	e.ok("mkdir", "@/many")
	for i := range 50 {
		e.ok("put", e.file("f", "x"), fmt.Sprintf("ann@example.com/many/f%02d", i))
	}
	e.ok("rm", "-R", "@/many")
	if m := e.spinTree("ann@example.com/many"); len(m) != 0 {
		t.Errorf("left after rm -R: %v", m)
	}
}

func TestInitForceKeepsOldKeys(t *testing.T) {
	home := t.TempDir()
	var out strings.Builder
	st := func() *State {
		out.Reset()
		return &State{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &out, Home: home}
	}
	if code := run([]string{"init", "ann@example.com"}, st()); code != 0 {
		t.Fatal(out.String())
	}
	first, _ := pack.Load(filepath.Join(home, "spin", "keys"))
	if code := run([]string{"init", "-force", "ann@example.com"}, st()); code != 0 {
		t.Fatal(out.String())
	}
	olds, _ := filepath.Glob(filepath.Join(home, "spin", "keys.old-*"))
	if len(olds) != 1 || !strings.Contains(out.String(), "Previous keys moved to "+olds[0]) {
		t.Fatalf("old keys: %v\n%s", olds, out.String())
	}
	old, err := pack.Load(olds[0])
	if err != nil || old.PublicKey() != first.PublicKey() {
		t.Errorf("old keys not kept: %v", err)
	}
	// A second -force in the same second keeps both earlier sets.
	if code := run([]string{"init", "-force", "ann@example.com"}, st()); code != 0 {
		t.Fatal(out.String())
	}
	if olds, _ := filepath.Glob(filepath.Join(home, "spin", "keys.old-*")); len(olds) != 2 {
		t.Errorf("after two -force runs: old keys %v", olds)
	}
}

// BenchmarkCpR copies 2,000 files of 4 KiB from the local disk into the
// in-memory fake: the cost of the command itself, without a network.
func BenchmarkCpR(b *testing.B) {
	e := &env{t: b, client: newFakeClient(ann), dir: b.TempDir()}
	data := strings.Repeat("x", 4096)
	for i := range 2000 {
		f := filepath.Join(e.dir, "src", fmt.Sprintf("d%d", i/100), fmt.Sprintf("f%04d", i))
		os.MkdirAll(filepath.Dir(f), 0o755)
		os.WriteFile(f, []byte(data), 0o644)
	}
	b.ResetTimer()
	for i := range b.N {
		if _, errs, code := e.run("cp", "-R", filepath.Join(e.dir, "src"), fmt.Sprintf("@/dst%d", i)); code != 0 {
			b.Fatal(errs)
		}
	}
	b.ReportMetric(float64(2000*b.N)/b.Elapsed().Seconds(), "files/s")
}

func TestCpInterrupted(t *testing.T) {
	e := newEnv(t)
	const n = 200 // 20ms each, 8 at a time: 500ms in all, interrupted at 50ms.
	for i := range n {
		e.file(fmt.Sprintf("many/f%03d", i), "x")
	}
	e.client.putDelay = 20 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	time.AfterFunc(50*time.Millisecond, cancel) // As SIGINT does in main.
	e.ctx = ctx
	// The fake ignores the context, so puts in flight finish; the rest are
	// not started, and the interruption is reported once, with how far the
	// copy got and the command that finishes it.
	_, errs, code := e.run("cp", "-R", filepath.Join(e.dir, "many"), "@/many")
	want := regexp.MustCompile(`^spin: cp: interrupted: ([0-9]+) of 200 files copied\n` +
		`spin: hint: to finish the copy, sending only what is missing, use: spin cp -R -u ` + regexp.QuoteMeta(filepath.Join(e.dir, "many")) + `/ @/many\n$`)
	m := want.FindStringSubmatch(errs)
	if code != exitFailure || m == nil {
		t.Fatalf("interrupted cp: exit %d, stderr:\n%s", code, errs)
	}
	if e.client.puts >= n || m[1] != strconv.Itoa(e.client.puts) {
		t.Errorf("%d files copied after the interruption, %s reported", e.client.puts, m[1])
	}
}

func TestDemo(t *testing.T) {
	// A stand-in for spin node: it writes an address and runs until
	// cancelled, as the real one does.
	var nodeArgs []string
	saved := runNode
	t.Cleanup(func() { runNode = saved })
	runNode = func(ctx context.Context, st *State, args []string) int {
		nodeArgs = args
		home := args[1]
		os.MkdirAll(home, 0o700)
		os.WriteFile(filepath.Join(home, "addr"), []byte("/ip4/127.0.0.1/tcp/4242/p2p/12D3KooWdemo\n"), 0o644)
		fmt.Fprintln(st.Stdout, "node log line")
		<-ctx.Done()
		return exitOK
	}
	world := newFakeClient(ann)
	var out, errs strings.Builder
	st := &State{Stdout: &out, Stderr: &errs,
		NewClient: func(ctx context.Context, cfg *Config) (spindle.Client, error) {
			if cfg.Node != "/ip4/127.0.0.1/tcp/4242/p2p/12D3KooWdemo" {
				return nil, fmt.Errorf("config names node %q", cfg.Node)
			}
			if _, err := pack.Load(cfg.Secrets); err != nil {
				return nil, err
			}
			return world.as(cfg.Username), nil
		}}
	if code := run([]string{"demo"}, st); code != 0 {
		t.Fatalf("demo: exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errs.String())
	}
	got := out.String()
	for _, want := range []string{
		"Starting a node: spin node -home ",
		"The node is ready at /ip4/127.0.0.1/tcp/4242/p2p/12D3KooWdemo\n",
		"ann$ spin init -node $NODE ann@example.com\n    Your recovery secret is:\n\n        ",
		"bob$ spin get ann@example.com/shared/plans.txt\n    spin: get: ann@example.com/shared/plans.txt: permission denied\n    spin: hint: ann@example.com must list you in an Access file\n",
		"ann$ echo \"read: bob@example.com\" | spin put - @/shared/Access\n",
		"Now bob can read it.\nbob$ spin get ann@example.com/shared/plans.txt\n    Meet at noon by the river.\n",
		"bob$ echo \"hello\" | spin put - ann@example.com/shared/bob.txt\n    spin: put: ann@example.com/shared/bob.txt: permission denied\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("demo output lacks %q:\n%s", want, got)
		}
	}
	if fmt.Sprint(nodeArgs[2:]) != "[-listen /ip4/127.0.0.1/tcp/0 -writers all]" {
		t.Errorf("node started with %q", nodeArgs)
	}
	if _, err := os.Stat(filepath.Dir(nodeArgs[1])); err == nil {
		t.Errorf("demo directory %s left behind", filepath.Dir(nodeArgs[1]))
	}

	// With -keep, the directory stays and the demo says how to carry on
	// with the node and the users it made.
	out.Reset()
	world = newFakeClient(ann)
	if code := run([]string{"demo", "-keep"}, st); code != 0 {
		t.Fatalf("demo -keep: exit %d\nstderr:\n%s", code, errs.String())
	}
	dir := filepath.Dir(nodeArgs[1])
	t.Cleanup(func() { os.RemoveAll(dir) })
	want := carryOn(dir)
	if !strings.HasSuffix(out.String(), want) || !strings.Contains(want, "spin node -home "+nodeArgs[1]+" -writers all\n") {
		t.Errorf("demo -keep ends:\n%s\nwant it to end with:\n%s", out.String()[max(0, out.Len()-400):], want)
	}
	if _, err := os.Stat(filepath.Join(dir, "ann", "spin", "config")); err != nil {
		t.Errorf("demo -keep left no config for ann: %v", err)
	}
}

func TestDirectoryHints(t *testing.T) {
	e := newEnv(t)
	e.ok("mkdir", "@/d")
	e.fails(exitFailure, "spin: get: ann@example.com/d: is a directory\n"+
		"spin: hint: to list it, use: spin ls ann@example.com/d; to copy it, use: spin cp -R ann@example.com/d DIR\n", "get", "@/d")
	e.fails(exitFailure, "spin: put: ann@example.com/d: is a directory\n"+
		"spin: hint: PATH names the file to write; to copy into the directory, use: spin cp SRC ann@example.com/d\n", "put", e.file("f", "f"), "@/d")
}

func TestInitSeveralConfigs(t *testing.T) {
	// Two users with config files in one directory get separate keys.
	dir := t.TempDir()
	for _, u := range []string{"ann", "bob"} {
		var out strings.Builder
		st := &State{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &out}
		cfgFile := filepath.Join(dir, u+".yaml")
		if code := run([]string{"-config", cfgFile, "init", "-node", "/ip4/127.0.0.1/tcp/1/p2p/x", u + "@example.com"}, st); code != 0 {
			t.Fatalf("init %s: %s", u, out.String())
		}
		cfg, err := ReadConfig(cfgFile)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Secrets != filepath.Join(dir, u+".keys") {
			t.Errorf("%s's keys are in %s", u, cfg.Secrets)
		}
		if k, err := pack.Load(cfg.Secrets); err != nil || string(k.UserName()) != u+"@example.com" {
			t.Errorf("%s's keys: %v", u, err)
		}
	}
	if got := keysDir("/h/spin/config"); got != "/h/spin/keys" {
		t.Errorf("keysDir of the usual config: %s", got)
	}
}

// spin init picks the node's socket when it may connect to it, and names
// key-cluster members by network addresses only.
func TestLocalNodeAddrs(t *testing.T) {
	dir, err := os.MkdirTemp("", "spinit")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	const tcp = "/ip4/127.0.0.1/tcp/4242/p2p/12D3KooWnode"
	file := filepath.Join(dir, "addr")
	for _, tc := range []struct {
		socket              string
		wantClient, wantNet string
	}{
		{sock, "/unix" + sock + "/p2p/12D3KooWnode", tcp},
		{filepath.Join(dir, "gone"), tcp, tcp}, // A socket this user cannot reach.
	} {
		addr := "/unix" + tc.socket + "/p2p/12D3KooWnode"
		os.WriteFile(file, []byte(addr+"\n"+tcp+"\n/ip4/127.0.0.1/udp/4242/quic-v1/p2p/12D3KooWnode\n"), 0o644)
		client, network := localNodeAddrs(file)
		if client != tc.wantClient || network != tc.wantNet {
			t.Errorf("socket %s: localNodeAddrs = %q, %q; want %q, %q", tc.socket, client, network, tc.wantClient, tc.wantNet)
		}
	}

	home := t.TempDir()
	os.MkdirAll(filepath.Join(home, "spin", "node"), 0o700)
	os.WriteFile(filepath.Join(home, "spin", "node", "addr"), []byte("/unix"+sock+"/p2p/12D3KooWnode\n"+tcp+"\n"), 0o644)
	var out, errs strings.Builder
	if code := run([]string{"init", "ann@example.com"}, &State{Stdout: &out, Stderr: &errs, Home: home}); code != 0 {
		t.Fatalf("init: exit %d\n%s", code, errs.String())
	}
	cfg, err := ReadConfig(filepath.Join(home, "spin", "config"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Node != spindle.PeerAddr("/unix"+sock+"/p2p/12D3KooWnode") || len(cfg.Keyserver) != 1 || cfg.Keyserver[0] != tcp {
		t.Errorf("config: node %q, keyserver %q", cfg.Node, cfg.Keyserver)
	}
}

// A new config may name another key cluster: init moves the key log of
// the old one aside, so that the next command trusts the cluster it meets.
func TestInitMovesKeyLogAside(t *testing.T) {
	home := t.TempDir()
	run1 := func(args ...string) {
		t.Helper()
		var out, errs strings.Builder
		if code := run(args, &State{Stdout: &out, Stderr: &errs, Home: home}); code != 0 {
			t.Fatalf("%v: exit %d\n%s", args, code, errs.String())
		}
	}
	run1("init", "-node", "/ip4/127.0.0.1/tcp/4242/p2p/12D3KooWnode", "ann@example.com")
	keyLog := filepath.Join(home, "spin", "keylog")
	os.WriteFile(keyLog, []byte("trusted cluster\n"), 0o600)
	run1("init", "-force", "-node", "/ip4/127.0.0.1/tcp/4243/p2p/12D3KooWother", "ann@example.com")
	if _, err := os.Stat(keyLog); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("key log still in place after init -force: %v", err)
	}
	old, _ := filepath.Glob(keyLog + ".old-*")
	if len(old) != 1 {
		t.Fatalf("moved key logs: %v, want one", old)
	}
	if data, _ := os.ReadFile(old[0]); string(data) != "trusted cluster\n" {
		t.Errorf("moved key log holds %q", data)
	}
}

// "spin get PATH > FILE" writes the file whole, whether stdout is a fresh
// file (written with O_DIRECT where the file system allows) or one that
// already holds something, and leaves stdout's offset at the end.
func TestGetToRedirectedStdout(t *testing.T) {
	e := newEnv(t)
	data := make([]byte, directMin+123_457)
	for i := range data {
		data[i] = byte(i * 7 / 5)
	}
	e.ok("put", e.file("big", string(data)), "@/big")
	for _, before := range []string{"", "already here\n"} {
		name := filepath.Join(e.dir, "out")
		out, err := os.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		out.WriteString(before)
		e.stdout = out
		e.ok("get", "@/big")
		out.WriteString("after\n")
		out.Close()
		e.stdout = nil
		got, _ := os.ReadFile(name)
		if want := before + string(data) + "after\n"; string(got) != want {
			t.Errorf("stdout holding %q: got %d bytes, want %d", before, len(got), len(want))
		}
	}
}
