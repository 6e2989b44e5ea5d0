package client

import (
	"context"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"

	"spindle.dev"
	"spindle.dev/node"
	"spindle.dev/p2p"
	"spindle.dev/pack"
)

func dialKeyLog(t *testing.T, n *node.Node, user spindle.UserName, keyLog string) (*Client, error) {
	t.Helper()
	keys, _, err := pack.Generate(user)
	if err != nil {
		t.Fatal(err)
	}
	return Dial(context.Background(), Config{Keys: keys, Node: n.DialAddr(), Logger: testLogger(t), KeyLog: keyLog})
}

// A client trusts the first key cluster it meets, keeps the newest tree
// head it has seen, and takes records only with proofs from that log.
func TestKeyLogRemembersHead(t *testing.T) {
	n := startNode(t, t.TempDir())
	defer n.Close()
	ctx := context.Background()
	file := filepath.Join(t.TempDir(), "keylog")
	ann, err := dialKeyLog(t, n, "ann@example.com", file)
	if err != nil {
		t.Fatal(err)
	}
	if err := ann.Signup(ctx); err != nil {
		t.Fatal(err)
	}
	bob := dialAs(t, n, "bob@example.com")
	bob.Close()
	u, err := ann.LookupUser(ctx, "bob@example.com")
	if err != nil {
		t.Fatal(err)
	}
	if u.Name != "bob@example.com" {
		t.Fatalf("looked up %s", u.Name)
	}
	if err := ann.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	l, err := parseKeyLog(file, data)
	if err != nil {
		t.Fatal(err)
	}
	if l.boot != n.VerifierKey() {
		t.Errorf("key log trusts %q, want the node's %q", l.boot, n.VerifierKey())
	}
	if tree := l.chk().Tree(); tree.N < 2 {
		t.Errorf("key log head is of %d records, want the 2 or more that hold ann and bob", tree.N)
	}
	if l.versions["bob@example.com"] != 1 {
		t.Errorf("key log versions: %v, want bob's record at version 1", l.versions)
	}
}

// A node whose key cluster is another one than the client trusts cannot
// hand it records.
func TestKeyLogRejectsAnotherCluster(t *testing.T) {
	ctx := context.Background()
	file := filepath.Join(t.TempDir(), "keylog")
	n1 := startNode(t, t.TempDir())
	c, err := dialKeyLog(t, n1, "ann@example.com", file)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Signup(ctx); err != nil {
		t.Fatal(err)
	}
	c.Close()
	n1.Close()
	before, _ := os.ReadFile(file)

	n2 := startNode(t, t.TempDir())
	defer n2.Close()
	dialAs(t, n2, "bob@example.com")
	_, err = dialKeyLog(t, n2, "ann@example.com", file)
	if !errors.Is(err, spindle.Integrity) || !errors.Is(err, ErrOtherCluster) || !strings.Contains(err.Error(), file) {
		t.Errorf("dial a node of another cluster: %v, want an Integrity error naming %s", err, file)
	}
	if after, _ := os.ReadFile(file); string(after) != string(before) {
		t.Errorf("key log changed after a rejected head:\n%s\nthen\n%s", before, after)
	}
}

// A cluster that shows a client a log that does not extend the one it saw
// before (a fork: same signing key, other history) is caught.
func TestKeyLogCatchesForkedLog(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	file := filepath.Join(t.TempDir(), "keylog")
	homeA := t.TempDir()
	a := startNode(t, homeA)
	ann, err := dialKeyLog(t, a, "ann@example.com", file)
	if err != nil {
		t.Fatal(err)
	}
	if err := ann.Signup(ctx); err != nil {
		t.Fatal(err)
	}
	dialAs(t, a, "bob@example.com").Close()
	if _, err := ann.LookupUser(ctx, "bob@example.com"); err != nil {
		t.Fatal(err)
	}
	ann.Close()
	a.Close()

	// The fork: a new cluster with A's identity and tree-head key. It
	// starts once with A's identity and a key of its own (a member whose
	// key file exists must have a store), then gets A's tree-head key.
	homeB := t.TempDir()
	copyFile := func(f string) {
		t.Helper()
		data, err := os.ReadFile(filepath.Join(homeA, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(homeB, f), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	copyFile(p2p.IdentityFile)
	startNode(t, homeB).Close()
	copyFile(filepath.Join("raft", "notekey"))
	b := startNode(t, homeB)
	defer b.Close()
	if b.VerifierKey() != a.VerifierKey() {
		t.Fatal("the fork signs with another key; the test sets it up wrong")
	}
	for _, u := range []spindle.UserName{"carl@example.com", "dave@example.com", "erin@example.com"} {
		dialAs(t, b, u).Close()
	}
	ann, err = dialKeyLog(t, b, "ann@example.com", file)
	if err != nil {
		t.Fatal(err)
	}
	defer ann.Close()
	_, err = ann.LookupUser(ctx, "carl@example.com")
	if !errors.Is(err, spindle.Integrity) || !strings.Contains(err.Error(), "rewritten") {
		t.Errorf("lookup in a forked log: %v, want an Integrity error saying the log was rewritten", err)
	}
}

func TestKeyLogUnreadable(t *testing.T) {
	n := startNode(t, t.TempDir())
	defer n.Close()
	file := filepath.Join(t.TempDir(), "keylog")
	os.WriteFile(file, []byte("not a verifier key\n"), 0o600)
	_, err := dialKeyLog(t, n, "ann@example.com", file)
	if !errors.Is(err, spindle.Invalid) || !strings.Contains(err.Error(), file) {
		t.Errorf("dial with a broken key log: %v, want an Invalid error naming %s", err, file)
	}
}

// A record older than one the client has seen of the same user is refused,
// across runs, and concurrent commands keep each other's newer versions.
func TestKeyLogVersions(t *testing.T) {
	_, vkey, err := note.GenerateKey(rand.Reader, "spindle-keyraft/12D3KooWTestCluster")
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "keylog")
	l, err := newKeyLog(file, vkey, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	bob := func(v int64) *spindle.User { return &spindle.User{Name: "bob@example.com", Version: v} }
	if err := l.seen(bob(2), l.floor("bob@example.com")); err != nil {
		t.Fatal(err)
	}
	if err := l.save(); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(file)
	again, err := parseKeyLog(file, data)
	if err != nil {
		t.Fatalf("reading back %q: %v", data, err)
	}
	floor := again.floor("bob@example.com")
	if err := again.seen(bob(1), floor); !errors.Is(err, spindle.Integrity) || !strings.Contains(err.Error(), "version 1") {
		t.Errorf("an older record after a restart: %v, want an Integrity error", err)
	}
	if err := again.seen(bob(4), floor); err != nil {
		t.Errorf("a newer record: %v", err)
	}
	if err := again.seen(bob(3), floor); err != nil { // Asked before 4 came back.
		t.Errorf("an answer overtaken by a newer one: %v", err)
	}

	// l saw only version 2 and saves after again saved 4: 4 stays.
	if err := again.save(); err != nil {
		t.Fatal(err)
	}
	l.seen(&spindle.User{Name: "carl@example.com", Version: 1}, 0)
	if err := l.save(); err != nil {
		t.Fatal(err)
	}
	data, _ = os.ReadFile(file)
	final, err := parseKeyLog(file, data)
	if err != nil {
		t.Fatal(err)
	}
	if final.versions["bob@example.com"] != 4 || final.versions["carl@example.com"] != 1 {
		t.Errorf("versions after two saves: %v, want bob 4 and carl 1", final.versions)
	}
	for _, bad := range []string{"version bob@example.com\n", "version bob@example.com zero\n", "version not-a-user 1\n"} {
		if _, err := parseKeyLog(file, []byte(vkey+"\n"+bad)); err == nil {
			t.Errorf("parsed a key log with %q", bad)
		}
	}
}

// Two commands sharing a key log: the one that saves last keeps the newer
// tree head the other saved, rather than writing back its older one.
func TestKeyLogSaveKeepsNewerHead(t *testing.T) {
	n := startNode(t, t.TempDir())
	defer n.Close()
	ctx := context.Background()
	file := filepath.Join(t.TempDir(), "keylog")
	keys, _, err := pack.Generate("ann@example.com")
	if err != nil {
		t.Fatal(err)
	}
	dial := func() *Client {
		c, err := Dial(ctx, Config{Keys: keys, Node: n.DialAddr(), Logger: testLogger(t), KeyLog: file})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	if err := dial().Signup(ctx); err != nil {
		t.Fatal(err)
	}
	first, second := dial(), dial()
	older := second.keyLog.chk().Tree().N

	dialAs(t, n, "bob@example.com").Close()
	if _, err := first.LookupUser(ctx, "bob@example.com"); err != nil {
		t.Fatal(err)
	}
	newer := first.keyLog.chk().Tree().N
	if newer <= older {
		t.Fatalf("the test sets up wrong: heads of %d and %d records", older, newer)
	}
	if err := first.keyLog.save(); err != nil {
		t.Fatal(err)
	}
	second.keyLog.seen(&spindle.User{Name: "carl@example.com", Version: 2}, 0)
	if err := second.keyLog.save(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	l, err := parseKeyLog(file, data)
	if err != nil {
		t.Fatal(err)
	}
	if got := l.chk().Tree().N; got != newer {
		t.Errorf("saved head is of %d records, want the newer %d (the older is %d)", got, newer, older)
	}
	if l.versions["bob@example.com"] != 1 || l.versions["carl@example.com"] != 2 {
		t.Errorf("saved versions %v, want both commands'", l.versions)
	}
}

// A key log of the first form (the verifier key on its first line, the
// versions seen, and a head of the old form) is upgraded when read: the
// key and every version seen are kept, the old head is dropped, and the
// file is written back in the second form.
func TestKeyLogUpgradesFirstForm(t *testing.T) {
	n := startNode(t, t.TempDir())
	defer n.Close()
	ctx := context.Background()
	bob := dialAs(t, n, "bob@example.com")
	bob.Close()
	file := filepath.Join(t.TempDir(), "keylog")
	old := n.VerifierKey() + "\nversion bob@example.com 1\nversion carol@example.com 7\n" +
		"spindle.dev key log\n1\n47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=\n\n— spindle-keyraft/x AAAA\n"
	if err := os.WriteFile(file, []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	ann, err := dialKeyLog(t, n, "ann@example.com", file)
	if err != nil {
		t.Fatalf("dial with a key log of the first form: %v", err)
	}
	if _, err := ann.LookupUser(ctx, "bob@example.com"); err != nil {
		t.Fatalf("lookup after the upgrade: %v", err)
	}
	if err := ann.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(data), keyLogHeader+"\nboot "+n.VerifierKey()+"\n") {
		t.Fatalf("key log not written in the second form:\n%s", data)
	}
	l, err := parseKeyLog(file, data)
	if err != nil {
		t.Fatal(err)
	}
	if l.versions["carol@example.com"] != 7 || l.versions["bob@example.com"] != 1 {
		t.Errorf("versions after the upgrade: %v, want carol's 7 and bob's 1 kept", l.versions)
	}
	if l.chk().Tree().N < 1 {
		t.Errorf("no head kept after the upgrade")
	}
	// A first-form file naming another key is still another cluster.
	other := filepath.Join(t.TempDir(), "keylog")
	_, vkey, err := note.GenerateKey(rand.Reader, "spindle-keyraft/12D3KooWOtherCluster")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(other, []byte(vkey+"\nversion bob@example.com 1\n"), 0o600)
	if _, err := dialKeyLog(t, n, "ann@example.com", other); !errors.Is(err, spindle.Integrity) {
		t.Errorf("first-form key log of another cluster: %v, want Integrity", err)
	}
}
