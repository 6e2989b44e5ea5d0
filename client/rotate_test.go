package client

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"spindle.dev"
	"spindle.dev/dirlog"
	"spindle.dev/node"
	"spindle.dev/node/wire"
	"spindle.dev/node/wire/wiretest"
	"spindle.dev/p2p"
	"spindle.dev/pack"
)

// After a user rotates keys, the node still replays the user's log at
// restart, and the user still reads files written with the old key.
func TestKeyRotationAcrossRestart(t *testing.T) {
	home := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n := startNode(t, home)
	addr := n.DialAddr()
	keys, first, err := pack.Generate("ann@example.com")
	if err != nil {
		t.Fatal(err)
	}
	// The key log goes across the restart: the restarted cluster's log
	// must extend the one the client saw, and the old key's record is
	// proved from it.
	keyLog := filepath.Join(t.TempDir(), "keylog")
	c, err := Dial(ctx, Config{Keys: keys, Node: addr, KeyLog: keyLog})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Signup(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, "@/old", bytes.NewReader([]byte("written with the first key")), 0, nil); err != nil {
		t.Fatal(err)
	}

	rotate(ctx, t, c, keys, first)
	c.Close()

	// Restart the node on the same home and port.
	n.Close()
	listen := strings.TrimSuffix(string(addr), "/p2p/"+n.Host().ID().String())
	n2, err := node.New(ctx, node.Config{Home: home, Listen: []string{listen}, Writers: []string{"all"}, Logger: testLogger(t)})
	if err != nil {
		t.Fatalf("node refused to restart after a key rotation: %v", err)
	}
	defer n2.Close()
	if d := n2.Damage(); len(d) > 0 {
		t.Fatalf("log cut after rotation: %v", d)
	}
	c2, err := Dial(ctx, Config{Keys: keys, Node: addr, KeyLog: keyLog})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	mustRead(t, c2, "@/old", []byte("written with the first key")) // Written before the rotation.
	if _, err := c2.Put(ctx, "@/new", bytes.NewReader([]byte("new key")), 0, nil); err != nil {
		t.Fatal(err)
	}
}

// rotate replaces the key of c's user with a new one through
// Client.RotateKey: keys rotate locally, and the key cluster gets a new
// record signed with the old key.
func rotate(ctx context.Context, t *testing.T, c *Client, keys *pack.Keys, _ pack.Secret) {
	t.Helper()
	if keys != c.keys {
		t.Fatal("rotate: keys are not the client's")
	}
	secret, err := pack.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.RotateKey(ctx, secret); err != nil {
		t.Fatalf("rotate: %v", err)
	}
}

// dialKeys dials n as the user of keys, with a key log of its own, as a
// new spin command would; the client is closed when the test ends.
func dialKeys(ctx context.Context, t *testing.T, n *node.Node, keys *pack.Keys) *Client {
	t.Helper()
	c, err := Dial(ctx, Config{Keys: keys, Node: n.DialAddr(), KeyLog: filepath.Join(t.TempDir(), "keylog"), Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// A long-lived client notices a reader's key rotation once its cached key
// record expires: files it writes after that are wrapped for the reader's
// new key, not the replaced one.
func TestClientKeyCacheExpires(t *testing.T) {
	defer func(old time.Duration) { keyCacheTTL = old }(keyCacheTTL)
	keyCacheTTL = 300 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := startNode(t, t.TempDir())
	t.Cleanup(func() { n.Close() }) // After the clients', before the home's removal.
	addr := n.DialAddr()
	dial := func(user spindle.UserName) (*Client, *pack.Keys, pack.Secret) {
		keys, secret, err := pack.Generate(user)
		if err != nil {
			t.Fatal(err)
		}
		c, err := Dial(ctx, Config{Keys: keys, Node: addr, KeyLog: filepath.Join(t.TempDir(), "keylog")})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if err := c.Signup(ctx); err != nil {
			t.Fatal(err)
		}
		return c, keys, secret
	}
	ann, _, _ := dial("ann@example.com")
	bob, bobKeys, bobFirst := dial("bob@example.com")
	if _, err := ann.Put(ctx, "ann@example.com/Access", strings.NewReader("*: ann@example.com\nread: bob@example.com\n"), 0, nil); err != nil {
		t.Fatal(err)
	}
	wrappedFor := func(name spindle.PathName) [][32]byte {
		e, err := ann.Put(ctx, name, strings.NewReader("for bob"), 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		h, err := pack.WrappedKeys(e)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	kh := func(k spindle.PublicKey) [32]byte {
		h, err := spindle.KeyHash(k)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	oldKey := bobKeys.PublicKey()
	if !slices.Contains(wrappedFor("ann@example.com/before"), kh(oldKey)) {
		t.Fatal("file not wrapped for bob's key")
	}

	rotate(ctx, t, bob, bobKeys, bobFirst)

	time.Sleep(keyCacheTTL + 100*time.Millisecond)
	ann.forgetReaders() // The 2 s cache of a directory's reader keys, which is not what this test is about.
	after := wrappedFor("ann@example.com/after")
	if slices.Contains(after, kh(oldKey)) || !slices.Contains(after, kh(bobKeys.PublicKey())) {
		t.Fatal("after the cached record expired, the file is still wrapped for bob's replaced key")
	}
	f, err := bob.Open(ctx, "ann@example.com/after")
	if err != nil {
		t.Fatalf("bob opens the file with his new key: %v", err)
	}
	f.Close()
}

// A replaced key's signature is accepted only for entries of its holder's
// tree at or before the position the rotation recorded: a reader refuses,
// with Integrity, an entry signed with the old key that a node serves as
// written after the rotation, and still reads the ones written before.
func TestRotatedKeySignsNothingNew(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := startNode(t, t.TempDir())
	defer n.Close()
	keys, first, err := pack.Generate("ann@example.com")
	if err != nil {
		t.Fatal(err)
	}
	c := dialKeys(ctx, t, n, keys)
	if err := c.Signup(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, "@/Access", strings.NewReader("*: ann@example.com\nread: bob@example.com\n"), 0, nil); err != nil {
		t.Fatal(err)
	}
	before, err := c.Put(ctx, "@/before", strings.NewReader("signed with the first key"), 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	rotate(ctx, t, c, keys, first)
	rec, err := c.LookupUser(ctx, "ann@example.com")
	if err != nil {
		t.Fatal(err)
	}
	if rec.DirSeq != before.Sequence {
		t.Fatalf("rotation recorded dir sequence %d, want %d", rec.DirSeq, before.Sequence)
	}

	// The entry as it is, at its position before the rotation, reads.
	c2 := dialKeys(ctx, t, n, keys)
	mustRead(t, c2, "@/before", []byte("signed with the first key"))

	// A node that serves the old-key entry at a position after the
	// rotation, where a thief's entry would be: by its Sequence, which
	// does not decide (the put's proved position does, so the entry
	// still reads), and by the position of the put in its proof, which
	// the proof then fails.
	var late atomic.Int32
	p2p.Handle(ctx, n.Host(), wire.ClientProtocol, wire.MaxMessage, func(ctx context.Context, remote peer.ID, data []byte) ([]byte, error) {
		out, err := n.ServeClient(ctx, remote, data)
		var req wiretest.Request
		if late.Load() == 0 || err != nil || wire.Decode(data, &req) != nil || req.Method != wire.DirLookup {
			return out, err
		}
		var resp wiretest.Response
		if err := wire.Decode(out, &resp); err != nil || resp.Entry == nil || resp.Entry.Name != "ann@example.com/before" {
			return out, err
		}
		resp.Entry.Sequence = rec.DirSeq + 1
		if late.Load() == 2 && len(resp.DirProofs) == 1 {
			pr, err := dirlog.UnmarshalProved(resp.DirProofs[0])
			if err != nil {
				return nil, err
			}
			pr.Entries[0].Seq = rec.DirSeq + 1
			resp.DirProofs[0] = pr.Marshal()
		}
		return wire.Encode(&resp)
	})
	late.Store(1)
	for _, r := range []*Client{c, c2} {
		mustRead(t, r, "@/before", []byte("signed with the first key"))
	}
	late.Store(2)
	for _, r := range []*Client{c, c2} {
		if _, err := r.Open(ctx, "@/before"); !errors.Is(err, spindle.Integrity) {
			t.Errorf("opened an entry whose put was moved after the rotation: %v, want Integrity", err)
		}
	}
	late.Store(0)
	mustRead(t, c, "@/before", []byte("signed with the first key"))
}

// Access and Group files, links and renames signed with a key its owner
// has since replaced still verify, with the keys the key cluster's log
// shows the owner held.
func TestRulesSignedBeforeRotation(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n := startNode(t, t.TempDir())
	defer n.Close()
	keys, first, err := pack.Generate("ann@example.com")
	if err != nil {
		t.Fatal(err)
	}
	c := dialKeys(ctx, t, n, keys)
	if err := c.Signup(ctx); err != nil {
		t.Fatal(err)
	}
	dialAs(t, n, "bob@example.com")
	for _, d := range []spindle.PathName{"@/docs", "@/Group"} {
		if _, err := c.MakeDirectory(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []struct{ name, text string }{
		{"@/docs/old", "before the rotation"},
		{"@/Group/friends", "bob@example.com\n"},
		{"@/docs/Access", "*: ann@example.com\nread: friends\n"},
	} {
		if _, err := c.Put(ctx, spindle.PathName(f.name), strings.NewReader(f.text), 0, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Rename(ctx, "@/docs", "@/papers"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PutLink(ctx, "@/papers/old", "@/link"); err != nil {
		t.Fatal(err)
	}

	rotate(ctx, t, c, keys, first)
	c.mu.Lock()
	c.userKeys = map[spindle.UserName]cachedUser{}
	c.verified = nil
	c.mu.Unlock()
	c.forgetReaders()

	mustRead(t, c, "@/link", []byte("before the rotation"))
	mustRead(t, c, "@/papers/Access", []byte("*: ann@example.com\nread: friends\n"))
	if _, err := c.Put(ctx, "@/papers/new", strings.NewReader("after"), 0, nil); err != nil {
		t.Fatal(err)
	}
	readers, err := c.Readers(ctx, "@/papers/new")
	if err != nil || !slices.Contains(readers, "bob@example.com") {
		t.Fatalf("readers after the rotation: %v, %v", readers, err)
	}
}

// A file signed with a key before its owner rotated it away, and moved
// after the rotation, still reads: what decides which keys may have signed
// it is the position of the put, which the directory proofs prove, not
// that of the rename.
func TestMovedAfterRotation(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := startNode(t, t.TempDir())
	defer n.Close()
	keys, first, err := pack.Generate("ann@example.com")
	if err != nil {
		t.Fatal(err)
	}
	c := dialKeys(ctx, t, n, keys)
	if err := c.Signup(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.MakeDirectory(ctx, "@/d"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, "@/d/f", strings.NewReader("signed with the first key"), 0, nil); err != nil {
		t.Fatal(err)
	}
	rotate(ctx, t, c, keys, first)
	if err := c.Rename(ctx, "@/d/f", "@/d/g"); err != nil {
		t.Fatal(err)
	}
	if err := c.Rename(ctx, "@/d", "@/e"); err != nil {
		t.Fatal(err)
	}
	c2 := dialKeys(ctx, t, n, keys)
	mustRead(t, c2, "@/e/g", []byte("signed with the first key"))
}

// Re-wrapping a file for its owner's new key (Share with fix, as spin
// rotate does) signs it with the new key: the fixed entry goes in the log
// after the rotation, where the old key signs nothing, and must still read.
func TestShareFixAfterRotation(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := startNode(t, t.TempDir())
	defer n.Close()
	keys, first, err := pack.Generate("ann@example.com")
	if err != nil {
		t.Fatal(err)
	}
	c := dialKeys(ctx, t, n, keys)
	if err := c.Signup(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, "@/f", strings.NewReader("written with the first key"), 0, nil); err != nil {
		t.Fatal(err)
	}
	rotate(ctx, t, c, keys, first)
	reps, err := c.Share(ctx, "ann@example.com/", true, true)
	if err != nil || len(reps) != 1 || !reps[0].Fixed || reps[0].Err != nil {
		t.Fatalf("share -fix after the rotation: %+v, %v", reps, err)
	}
	e, err := c.Lookup(ctx, "@/f", false)
	if err != nil {
		t.Fatal(err)
	}
	if err := pack.Verify(e, []spindle.PublicKey{keys.PublicKey()}); err != nil {
		t.Fatalf("the re-wrapped entry is not signed with the new key: %v", err)
	}
	mustRead(t, dialKeys(ctx, t, n, keys), "@/f", []byte("written with the first key"))
}
