package client

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"spindle.dev"
	"spindle.dev/dirlog"
	"spindle.dev/node/wire"
	"spindle.dev/node/wire/wiretest"
	"spindle.dev/pack"
)

// Attack 3 of issue 26, as a relay mounts it. The relay records an
// honest answer to a WhichAccess of ann's docs/f, made while ann let
// mallory read docs; ann then removes mallory; when carol, who may write
// docs and has not seen ann's tree since, puts docs/f, the relay hands
// her the recorded answer, genuine and signed, and her client wraps the
// file key for mallory. The sequencer refuses the entry (its readers
// were worked out before the Access file changed), and carol's client
// works them out again: if the relay replays only once, the file is
// stored with no key for mallory; if it keeps replaying, nothing is
// stored. Either way the file key reaches mallory through no entry.
func TestRelayReplaysOldWhichAccess(t *testing.T) {
	for _, tc := range []struct {
		name   string
		always bool
	}{{"replayed once", false}, {"replayed always", true}} {
		t.Run(tc.name, func(t *testing.T) {
			w := newLieWorld(t)
			carol := dialAs(t, w.n, "carol@example.com")
			const name = "ann@example.com/docs/f"
			w.put(t, "@/docs/Access", "read: bob@example.com, friends, mallory@evil.example\nread, write, create: carol@example.com\n*: ann@example.com\n")

			var mu sync.Mutex
			var recorded *wiretest.Response
			w.l.tell(func(req *wiretest.Request, resp *wiretest.Response) {
				if req.Method == wire.DirWhich && req.Name == name {
					mu.Lock()
					c := *resp
					recorded = &c
					mu.Unlock()
				}
			})
			if _, err := w.ann.dir.WhichAccess(w.ctx, name); err != nil {
				t.Fatal(err)
			}
			w.l.tell(nil)
			if recorded == nil {
				t.Fatal("the relay recorded no answer")
			}
			w.put(t, "@/docs/Access", "read: bob@example.com, friends\nread, write, create: carol@example.com\n*: ann@example.com\n")

			replayed := 0
			w.l.tell(func(req *wiretest.Request, resp *wiretest.Response) {
				mu.Lock()
				defer mu.Unlock()
				if req.Method == wire.DirWhich && req.Name == name && (tc.always || replayed == 0) {
					*resp = *recorded
					replayed++
				}
			})
			_, err := carol.Put(w.ctx, name, strings.NewReader("for bob's eyes"), 0, nil)
			w.l.tell(nil)
			if replayed == 0 {
				t.Fatal("the relay replayed nothing")
			}
			mk, kerr := spindle.KeyHash(w.mallory.keys.PublicKey())
			if kerr != nil {
				t.Fatal(kerr)
			}
			if tc.always {
				if err == nil {
					t.Error("carol's put went through while the relay kept replaying")
				}
				t.Logf("carol's put: %v", err)
				w.noKeyForMallory(t, name)
				return
			}
			if err != nil {
				t.Fatalf("carol's put after one replay: %v", err)
			}
			e := w.entry(t, name)
			hs, err := pack.WrappedKeys(e)
			if err != nil {
				t.Fatal(err)
			}
			if slices.Contains(hs, mk) {
				t.Fatal("carol's file key is wrapped for mallory, whom ann had removed")
			}
			bk, _ := spindle.KeyHash(w.userKey(t, "bob@example.com"))
			if !slices.Contains(hs, bk) {
				t.Error("carol's file key is not wrapped for bob")
			}
		})
	}
}

// userKey returns user's current public key.
func (w *lieWorld) userKey(t *testing.T, user spindle.UserName) spindle.PublicKey {
	t.Helper()
	u, err := w.ann.LookupUser(w.ctx, user)
	if err != nil {
		t.Fatal(err)
	}
	return u.PublicKey
}

// Attack 5 of issue 26, as a thief holding ann's replaced key mounts it
// in bob's tree, where ann may write: a link signed with the old key and
// anchored where the thief's client follows the key log, after the
// rotation. The dir host refuses to append it, and a reader (and so spin
// audit, which checks each entry of a log as checkSig does) refuses it
// however it is served; the link ann made with that key before the
// rotation still verifies.
func TestStolenOldKeyInAnotherTree(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := startNode(t, t.TempDir())
	defer n.Close()
	keys, first, err := pack.Generate("ann@example.com")
	if err != nil {
		t.Fatal(err)
	}
	a := dialKeys(ctx, t, n, keys)
	if err := a.Signup(ctx); err != nil {
		t.Fatal(err)
	}
	b := dialAs(t, n, "bob@example.com")
	if _, err := b.Put(ctx, "@/Access", strings.NewReader("*: bob@example.com\nread, write, create, list: ann@example.com\n"), 0, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := a.PutLink(ctx, "ann@example.com/x", "bob@example.com/before"); err != nil {
		t.Fatal(err)
	}
	rotate(ctx, t, a, keys, first)
	old, err := pack.FromSecret("ann@example.com", first)
	if err != nil {
		t.Fatal(err)
	}

	// The thief's client follows the key log, past the rotation.
	thief := dialAs(t, n, "thief@example.com")
	h, err := b.svc.Head(ctx, "bob@example.com")
	if err != nil {
		t.Fatal(err)
	}
	e := &dirlog.Entry{Seq: h.Seq + 1, Prev: h.Hash, Time: spindle.Now(), Op: dirlog.OpLink, ReadersAt: h.Seq, KeyAt: thief.keyLogSize(),
		Entry: spindle.DirEntry{Name: "bob@example.com/stolen", Attr: spindle.AttrLink, Link: "ann@example.com/x", Time: spindle.Now(), Sequence: h.Seq + 1}}
	if err := e.Sign(old); err != nil {
		t.Fatal(err)
	}
	if _, err := b.svc.Append(ctx, e); err == nil {
		t.Error("the node appended an entry signed with a replaced key")
	} else {
		t.Logf("node: %v", err)
	}
	if err := b.checkSig(ctx, e); err == nil {
		t.Error("a reader accepts an entry of bob's tree signed with ann's replaced key after the rotation")
	} else {
		t.Logf("reader: %v", err)
	}

	// Ann's link from before the rotation still verifies.
	pre, err := b.Lookup(ctx, "bob@example.com/before", false)
	if err != nil {
		t.Fatalf("ann's link from before the rotation: %v", err)
	}
	rec, err := dirlog.UnmarshalEntry(pre.Signed[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := b.checkSig(ctx, rec); err != nil {
		t.Fatalf("ann's link from before the rotation: %v", err)
	}

	// A thief whose entry a colluding dir host takes backdates its
	// anchor to before the rotation. A reader that has seen nothing of
	// bob's tree anchored after the rotation cannot tell (the residual
	// dirlog.HeldKeys states); one that has, at an earlier place in the
	// tree, refuses it, since a tree's anchors never decrease.
	_, index, err := b.provedHistoryAt(ctx, "ann@example.com")
	if err != nil {
		t.Fatal(err)
	}
	rotation := index[len(index)-1]
	backdate := func(h *dirlog.Head, name spindle.PathName) *dirlog.Entry {
		e := &dirlog.Entry{Seq: h.Seq + 1, Prev: h.Hash, Time: spindle.Now(), Op: dirlog.OpLink, ReadersAt: h.Seq, KeyAt: rotation,
			Entry: spindle.DirEntry{Name: name, Attr: spindle.AttrLink, Link: "ann@example.com/x", Time: spindle.Now(), Sequence: h.Seq + 1}}
		if err := e.Sign(old); err != nil {
			t.Fatal(err)
		}
		return e
	}
	if err := b.checkSig(ctx, backdate(h, "bob@example.com/backdated")); err != nil {
		t.Fatalf("the residual moved: a reader refuses a backdated entry in a tree it saw nothing of after the rotation: %v", err)
	}
	if err := b.catchUpKeyLog(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := b.PutLink(ctx, "bob@example.com/before", "@/after"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Lookup(ctx, "@/after", false); err != nil {
		t.Fatal(err)
	}
	h, err = b.svc.Head(ctx, "bob@example.com")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.checkSig(ctx, backdate(h, "bob@example.com/backdated")); err == nil {
		t.Error("a reader that saw bob's tree anchored after the rotation accepts a backdated entry after it")
	} else {
		t.Logf("reader, backdated: %v", err)
	}
}

// A writer whose key log is behind the anchor of a tree it writes to (the
// tree's other writers follow a newer head) is refused as Stale, catches
// its key log up and signs again, anchored afresh.
func TestWriterCatchesUpWithTheKeyLog(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := startNode(t, t.TempDir())
	defer n.Close()
	a := dialAs(t, n, "ann@example.com")
	b := dialAs(t, n, "bob@example.com")
	if _, err := a.Put(ctx, "@/Access", strings.NewReader("*: ann@example.com\nread, write, create: bob@example.com\n"), 0, nil); err != nil {
		t.Fatal(err)
	}
	before := b.keyLogSize()
	for _, u := range []spindle.UserName{"cat@example.com", "dan@example.com"} {
		dialAs(t, n, u)
	}
	if err := a.catchUpKeyLog(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := a.MakeDirectory(ctx, "@/ann-after"); err != nil {
		t.Fatal(err)
	}
	if a.keyLogSize() <= before {
		t.Fatalf("ann's key log is at %d, not past bob's %d", a.keyLogSize(), before)
	}
	if _, err := b.MakeDirectory(ctx, "ann@example.com/bob-after"); err != nil {
		t.Fatalf("bob, his key log behind the tree's anchor: %v", err)
	}
	if b.keyLogSize() < a.keyLogSize() {
		t.Errorf("bob's key log is at %d, behind the tree's anchor %d", b.keyLogSize(), a.keyLogSize())
	}
}
