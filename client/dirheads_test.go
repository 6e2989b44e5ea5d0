package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"spindle.dev"
	"spindle.dev/dirlog"
	"spindle.dev/dirlog/dirlogtest"
	"spindle.dev/node"
	"spindle.dev/pack"
)

// A node brought back from an older copy of its home answers from an older
// state of a user's log; a client that saw the newer state says so.
func TestDirHeadsCatchRollback(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	home, old := filepath.Join(dir, "home"), filepath.Join(dir, "old")
	heads := filepath.Join(dir, "dirheads")
	keys, _, err := pack.Generate("ann@example.com")
	if err != nil {
		t.Fatal(err)
	}
	dial := func(n *node.Node, file string) *Client {
		t.Helper()
		c, err := Dial(ctx, Config{Keys: keys, Node: n.DialAddr(), Logger: testLogger(t), DirHeads: file})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	put := func(c *Client, name spindle.PathName) {
		t.Helper()
		if _, err := c.Put(ctx, name, bytes.NewReader([]byte(name)), 0, nil); err != nil {
			t.Fatal(err)
		}
	}

	n := startNode(t, home)
	c := dial(n, heads)
	if err := c.Signup(ctx); err != nil {
		t.Fatal(err)
	}
	put(c, "@/a")
	c.Close()
	n.Close()
	if out, err := exec.Command("cp", "-a", home, old).CombinedOutput(); err != nil {
		t.Fatalf("copy the node's home: %v\n%s", err, out)
	}

	n = startNode(t, home)
	c = dial(n, heads)
	put(c, "@/b")
	if _, err := c.Lookup(ctx, "@/b", true); err != nil {
		t.Fatal(err)
	}
	c.Close()
	n.Close()
	data, err := os.ReadFile(heads)
	if err != nil || !strings.HasPrefix(string(data), "ann@example.com ") {
		t.Fatalf("heads file: %q, %v", data, err)
	}

	// The old copy, with the same identity, does not know @/b.
	n = startNode(t, old)
	defer n.Close()
	c = dial(n, heads)
	defer c.Close()
	_, err = c.Lookup(ctx, "@/a", true)
	if !errors.Is(err, spindle.Integrity) || !strings.Contains(err.Error(), "rollback") {
		t.Errorf("lookup on a rolled-back node: %v, want an Integrity error saying rollback", err)
	}

	// A client that never saw the newer state has nothing to compare with.
	fresh := dial(n, filepath.Join(dir, "fresh"))
	defer fresh.Close()
	if _, err := fresh.Lookup(ctx, "@/a", true); err != nil {
		t.Errorf("lookup by a client without history: %v", err)
	}
}

func TestDirHeadsFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "dirheads")
	os.WriteFile(file, []byte("ann@example.com 7 "+strings.Repeat("ab", 32)+"\n"), 0o600)
	d, err := openDirHeads(file)
	if err != nil {
		t.Fatal(err)
	}
	if h := d.heads["ann@example.com"]; h == nil || h.Seq != 7 || h.Hash[0] != 0xab {
		t.Errorf("read head %+v", h)
	}
	for _, bad := range []string{
		"ann@example.com 7\n",
		"ann@example.com -1 " + strings.Repeat("ab", 32) + "\n",
		"ann@example.com 7 abc\n",
		"not a user 7 " + strings.Repeat("ab", 32) + "\n",
	} {
		os.WriteFile(file, []byte(bad), 0o600)
		if _, err := openDirHeads(file); !errors.Is(err, spindle.Invalid) || !strings.Contains(err.Error(), file+":1") {
			t.Errorf("heads file %q: %v, want an Invalid error naming %s:1", bad, err, file)
		}
	}
}

// Answers to concurrent calls arrive in any order: an answer older than
// one already seen is fine if it is no older than what was seen when its
// call was made. The same sequence number with another hash never is.
func TestDirHeadsOutOfOrder(t *testing.T) {
	d, err := openDirHeads(filepath.Join(t.TempDir(), "dirheads"))
	if err != nil {
		t.Fatal(err)
	}
	head := func(seq int64, b byte) *dirlog.Head {
		return &dirlog.Head{User: "ann@example.com", Seq: seq, Hash: dirlog.Hash{b}}
	}
	if err := d.check(nil, head(10, 1)); err != nil {
		t.Fatal(err)
	}
	floor := d.floor("ann@example.com") // Two calls made now...
	if err := d.check(floor, head(12, 2)); err != nil {
		t.Fatal(err)
	}
	if err := d.check(floor, head(11, 3)); err != nil { // ...answered out of order.
		t.Errorf("an answer overtaken by a newer one: %v", err)
	}
	if err := d.check(d.floor("ann@example.com"), head(11, 3)); !errors.Is(err, spindle.Integrity) {
		t.Errorf("an answer older than the newest seen when its call was made: %v, want a rollback", err)
	}
	if err := d.check(floor, head(12, 4)); !errors.Is(err, spindle.Integrity) {
		t.Errorf("two hashes at one sequence number: %v, want a fork", err)
	}
	if got := d.floor("ann@example.com"); got.Seq != 12 || got.Hash != (dirlog.Hash{2}) {
		t.Errorf("newest head is %d %s, want 12 and the first hash", got.Seq, got.Hash)
	}
}

// Commands running at once each save their heads: the file stays whole,
// and no save drops a head another command saved, so every user ends at
// the newest sequence number saved for it. The commands are separate
// processes (this test binary run again), as spin commands are.
func TestDirHeadsConcurrentSaves(t *testing.T) {
	const procs, saves = 8, 20
	if spec := os.Getenv("SPINDLE_DIRHEADS_CHILD"); spec != "" {
		file, i, _ := strings.Cut(spec, "|")
		for j := range saves {
			d, err := openDirHeads(file)
			if err != nil {
				t.Fatalf("open while others save: %v", err)
			}
			user := spindle.UserName("u" + i + "@example.com")
			if err := d.check(nil, &dirlog.Head{User: user, Seq: int64(j + 1)}); err != nil {
				t.Fatal(err)
			}
			if err := d.save(); err != nil {
				t.Fatal(err)
			}
		}
		return
	}
	file := filepath.Join(t.TempDir(), "dirheads")
	var cmds []*exec.Cmd
	for i := range procs {
		cmd := exec.Command(os.Args[0], "-test.run=^TestDirHeadsConcurrentSaves$")
		cmd.Env = append(os.Environ(), fmt.Sprintf("SPINDLE_DIRHEADS_CHILD=%s|%d", file, i))
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
	}
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Errorf("saving process %d: %v", i, err)
		}
	}
	d, err := openDirHeads(file)
	if err != nil {
		t.Fatal(err)
	}
	for i := range procs {
		user := spindle.UserName(fmt.Sprintf("u%d@example.com", i))
		if h := d.heads[user]; h == nil || h.Seq != saves {
			t.Errorf("%s ends at %+v, want sequence %d", user, h, saves)
		}
	}

	old, err := openDirHeads(file)
	if err != nil {
		t.Fatal(err)
	}
	newer := &dirlog.Head{User: "late@example.com", Seq: 99}
	d.check(nil, newer)
	d.save()
	old.check(nil, &dirlog.Head{User: "u0@example.com", Seq: 100})
	old.save() // Read before late@ was saved; must not drop it.
	final, _ := openDirHeads(file)
	if h := final.heads["late@example.com"]; h == nil || h.Seq != 99 {
		t.Errorf("a save dropped a newer head another command saved: %+v", h)
	}
	if tmps, _ := filepath.Glob(file + ".tmp*"); len(tmps) > 0 {
		t.Errorf("temporary files left: %v", tmps)
	}
}

// The anchor, the newest signed head with a log root, is kept beside a
// newer unsigned head (the one the client's own append left) across
// commands, and refused if it does not fit the line.
func TestDirHeadsKeepAnchor(t *testing.T) {
	signer := dirlogtest.NewSigner(t, "host.example")
	file := filepath.Join(t.TempDir(), "dirheads")
	d, err := openDirHeads(file)
	if err != nil {
		t.Fatal(err)
	}
	signed := &dirlog.Head{User: "ann@example.com", Seq: 5, Root: dirlog.Hash{1}, LogRoot: dirlog.Hash{2}}
	signed.Hash[0] = 5
	if err := signed.Sign(signer); err != nil {
		t.Fatal(err)
	}
	if err := d.check(nil, signed); err != nil {
		t.Fatal(err)
	}
	own := &dirlog.Head{User: "ann@example.com", Seq: 6}
	own.Hash[0] = 6
	if err := d.check(signed, own); err != nil {
		t.Fatal(err)
	}
	if err := d.save(); err != nil {
		t.Fatal(err)
	}
	again, err := openDirHeads(file)
	if err != nil {
		t.Fatal(err)
	}
	if f := again.floor("ann@example.com"); f.Seq != 6 || len(f.Sig) != 0 {
		t.Errorf("floor after reopening: %+v", f)
	}
	if a := again.anchor("ann@example.com"); a == nil || a.Seq != 5 || a.LogRoot != signed.LogRoot || len(a.Sig) == 0 {
		t.Fatalf("anchor after reopening: %+v", a)
	}
	b, _ := os.ReadFile(file)
	f := strings.Fields(string(b))
	if len(f) != 5 || f[3] != "-" {
		t.Fatalf("heads file %q: want USER SEQ HASH - ANCHOR", b)
	}
	// An anchor that is not below the line's head is refused.
	bad := strings.Join([]string{f[0], "4", strings.Repeat("ab", 32), "-", f[4]}, " ") + "\n"
	os.WriteFile(file, []byte(bad), 0o600)
	if _, err := openDirHeads(file); !errors.Is(err, spindle.Invalid) {
		t.Errorf("anchor above the line's head: %v", err)
	}
}
