package host

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"spindle.dev/dirlog"

	"spindle.dev"
)

func TestOperations(t *testing.T) {
	for _, k := range storeKinds() {
		t.Run(k.name, func(t *testing.T) {
			e := newEnv(t, k.new(t))
			e.setup()
			ctx := e.ctx
			c := e.as(ann)

			d := e.do(c.Lookup(ctx, "ann@example.com/docs/sub/b.txt"))
			if d.Size != 3<<20 || len(d.Blocks) != 3 || d.Writer != ann || d.Sequence != 5 {
				t.Fatalf("b.txt = %+v", d)
			}
			// Replace a file.
			d = e.do(c.Put(ctx, file("ann@example.com/docs/a.txt", 20)))
			if d.Size != 20 || d.Sequence != 6 {
				t.Fatalf("replaced a.txt = %+v", d)
			}
			// A link, and a lookup through it.
			e.do(c.PutLink(ctx, "bob@example.com/shared", "ann@example.com/docs/bob"))
			d, err := c.Lookup(ctx, "ann@example.com/docs/bob/x/y")
			wantKind(t, err, spindle.NotDir, "lookup through link")
			if d == nil || d.Name != "ann@example.com/docs/bob" || !d.Attr.IsLink() || d.Link != "bob@example.com/shared" {
				t.Fatalf("lookup through link returned %+v", d)
			}
			// Delete: files, empty directories; not non-empty ones or the root.
			_, err = c.Delete(ctx, "ann@example.com/docs/sub")
			wantKind(t, err, spindle.NotEmpty, "delete non-empty dir")
			_, err = c.Delete(ctx, "ann@example.com/")
			wantKind(t, err, spindle.Invalid, "delete root")
			_, err = c.Delete(ctx, "ann@example.com/docs/nothing")
			wantKind(t, err, spindle.NotExist, "delete missing")
			d = e.do(c.Delete(ctx, "ann@example.com/docs/sub/b.txt"))
			if d.Name != "ann@example.com/docs/sub/b.txt" || d.Size != 3<<20 {
				t.Fatalf("delete returned %+v", d)
			}
			e.do(c.Delete(ctx, "ann@example.com/docs/sub"))
			_, err = c.Lookup(ctx, "ann@example.com/docs/sub")
			wantKind(t, err, spindle.NotExist, "lookup deleted dir")
			// Structural errors.
			_, err = c.MakeDirectory(ctx, "ann@example.com/docs")
			wantKind(t, err, spindle.Exist, "mkdir existing")
			_, err = c.Put(ctx, file("ann@example.com/no/such/file", 1))
			wantKind(t, err, spindle.NotExist, "put without parent")
			_, err = c.Put(ctx, file("ann@example.com/docs/a.txt/under", 1))
			wantKind(t, err, spindle.NotDir, "put under a file")
			_, err = c.Put(ctx, file("ann@example.com/docs", 1))
			wantKind(t, err, spindle.IsDir, "put over a directory")
			bad := file("ann@example.com/docs/c.txt", 10)
			bad.Blocks[0].Size = 9
			_, err = c.Put(ctx, bad)
			wantKind(t, err, spindle.Invalid, "blocks not covering size")
			_, err = c.Put(ctx, &spindle.DirEntry{Name: "ann@example.com/docs/c.txt", Packing: spindle.EEPack, Inline: []byte("x"), Size: 1})
			wantKind(t, err, spindle.Invalid, "inline data in an ordinary file")
			_, err = c.Put(ctx, control("ann@example.com/Access", "rread: bob@example.com"))
			wantKind(t, err, spindle.Invalid, "malformed Access file")
			if !strings.Contains(err.Error(), "line 1") {
				t.Errorf("malformed Access error does not name the line: %v", err)
			}
			_, err = c.Put(ctx, control("ann@example.com/Group/big", strings.Repeat("bob@example.com\n", dirlog.MaxInline/16+1)))
			wantKind(t, err, spindle.Invalid, "oversized Group file")
			_, err = c.MakeDirectory(ctx, "ann@example.com/docs/Access")
			wantKind(t, err, spindle.Invalid, "directory named Access")
			// Another user's tree does not exist until its owner makes it.
			_, err = e.as(bob).Put(ctx, file("bob@example.com/x", 1))
			wantKind(t, err, spindle.NotExist, "put before root")
			_, err = e.as(ann).MakeDirectory(ctx, "bob@example.com/")
			wantKind(t, err, spindle.Private, "mkdir of someone else's root")
			e.do(e.as(bob).MakeDirectory(ctx, "bob@example.com"))
			e.do(e.as(bob).Put(ctx, file("bob@example.com/x", 1)))
		})
	}
}

func TestSequenceStamping(t *testing.T) {
	e := newEnv(t, &MemStore{})
	e.setup()
	ctx := e.ctx
	c := e.as(ann)
	seqOf := func(name spindle.PathName) int64 {
		t.Helper()
		return e.do(c.Lookup(ctx, name)).Sequence
	}
	// setup: 1 root, 2 docs, 3 a.txt, 4 sub, 5 b.txt.
	for name, want := range map[spindle.PathName]int64{
		"ann@example.com/": 5, "ann@example.com/docs": 5, "ann@example.com/docs/a.txt": 3,
		"ann@example.com/docs/sub": 5, "ann@example.com/docs/sub/b.txt": 5,
	} {
		if got := seqOf(name); got != want {
			t.Errorf("%s: sequence %d, want %d", name, got, want)
		}
	}
	e.do(c.Put(ctx, file("ann@example.com/docs/a.txt", 1)))
	e.do(c.MakeDirectory(ctx, "ann@example.com/other"))
	for name, want := range map[spindle.PathName]int64{
		"ann@example.com/": 7, "ann@example.com/docs": 6, "ann@example.com/docs/a.txt": 6,
		"ann@example.com/docs/sub": 5, "ann@example.com/other": 7,
	} {
		if got := seqOf(name); got != want {
			t.Errorf("%s: sequence %d, want %d", name, got, want)
		}
	}
	e.do(c.Delete(ctx, "ann@example.com/docs/sub/b.txt"))
	if seqOf("ann@example.com/docs/sub") != 8 || seqOf("ann@example.com/docs") != 8 || seqOf("ann@example.com/other") != 7 {
		t.Error("delete did not stamp exactly the ancestors")
	}
}

func TestRenameDirectory(t *testing.T) {
	e := newEnv(t, &MemStore{})
	e.setup()
	ctx := e.ctx
	c := e.as(ann)
	e.do(c.Put(ctx, control("ann@example.com/docs/sub/Access", "r: bob@example.com\n*: ann@example.com\n")))
	e.do(c.MakeDirectory(ctx, "ann@example.com/archive"))
	before := e.dump(ann)

	_, err := c.Rename(ctx, "ann@example.com/docs", "ann@example.com/docs/sub/inside")
	wantKind(t, err, spindle.Invalid, "rename into itself")
	_, err = c.Rename(ctx, "ann@example.com/docs", "ann@example.com/archive")
	wantKind(t, err, spindle.Exist, "rename onto existing")
	_, err = c.Rename(ctx, "ann@example.com/", "ann@example.com/x")
	wantKind(t, err, spindle.Invalid, "rename root")
	_, err = c.Rename(ctx, "ann@example.com/docs/a.txt", "ann@example.com/docs/Access")
	wantKind(t, err, spindle.Invalid, "rename a file into an Access file")
	_, err = c.Rename(ctx, "ann@example.com/docs", "bob@example.com/docs")
	wantKind(t, err, spindle.Invalid, "rename across trees")
	if e.dump(ann) != before {
		t.Fatal("refused renames changed the tree")
	}

	d := e.do(c.Rename(ctx, "ann@example.com/docs", "ann@example.com/archive/2026"))
	if d.Name != "ann@example.com/archive/2026" || !d.Attr.IsDir() {
		t.Fatalf("rename returned %+v", d)
	}
	seq := d.Sequence
	for _, name := range []spindle.PathName{"ann@example.com/docs", "ann@example.com/docs/a.txt", "ann@example.com/docs/sub/b.txt"} {
		_, err := c.Lookup(ctx, name)
		wantKind(t, err, spindle.NotExist, "old name "+string(name))
	}
	for _, name := range []spindle.PathName{"ann@example.com/", "ann@example.com/archive", "ann@example.com/archive/2026", "ann@example.com/archive/2026/a.txt", "ann@example.com/archive/2026/sub/b.txt", "ann@example.com/archive/2026/sub/Access"} {
		d := e.do(c.Lookup(ctx, name))
		if d.Name != name || d.Sequence != seq {
			t.Errorf("%s after rename: name %s sequence %d, want %d", name, d.Name, d.Sequence, seq)
		}
	}
	if b := e.do(c.Lookup(ctx, "ann@example.com/archive/2026/sub/b.txt")); len(b.Blocks) != 3 || b.Size != 3<<20 {
		t.Errorf("moved file lost its blocks: %+v", b)
	}
	// The moved Access file governs its new place.
	if _, err := e.as(bob).Lookup(ctx, "ann@example.com/archive/2026/sub/b.txt"); err != nil {
		t.Errorf("bob cannot read under the moved Access file: %v", err)
	}
	if w := e.do(c.WhichAccess(ctx, "ann@example.com/archive/2026/sub/b.txt")); w == nil || w.Name != "ann@example.com/archive/2026/sub/Access" {
		t.Errorf("WhichAccess after move = %+v", w)
	}
	// Renaming a file.
	e.do(c.Rename(ctx, "ann@example.com/archive/2026/a.txt", "ann@example.com/a.txt"))
	e.do(c.Lookup(ctx, "ann@example.com/a.txt"))
	after := e.dump(ann)
	e.reopen()
	if got := e.dump(ann); got != after {
		t.Fatalf("replay after renames differs:\n%s\nwant\n%s", got, after)
	}
}

func TestReplay(t *testing.T) {
	for _, k := range storeKinds() {
		t.Run(k.name, func(t *testing.T) {
			e := newEnv(t, k.new(t))
			e.setup()
			ctx := e.ctx
			c := e.as(ann)
			e.do(c.Put(ctx, control("ann@example.com/Access", "*: ann@example.com\nr,l,c,w: bob@example.com\n")))
			e.do(e.as(bob).Put(ctx, file("ann@example.com/docs/from-bob", 5)))
			e.do(c.PutLink(ctx, "ann@example.com/docs", "ann@example.com/l"))
			e.do(c.Rename(ctx, "ann@example.com/docs/sub", "ann@example.com/sub2"))
			e.do(c.Delete(ctx, "ann@example.com/docs/a.txt"))
			e.do(e.as(bob).MakeDirectory(ctx, "bob@example.com/"))
			want := e.dump(ann) + e.dump(bob)
			wantHead := e.do2(e.s.Head(ctx, ann))
			e.reopen()
			if got := e.dump(ann) + e.dump(bob); got != want {
				t.Fatalf("replayed tree differs:\n%s\nwant\n%s", got, want)
			}
			if d := e.s.Damage(); len(d) != 0 {
				t.Fatalf("damage reported on a clean log: %v", d)
			}
			h := e.do2(e.s.Head(ctx, ann))
			if h.Seq != wantHead.Seq || h.Hash != wantHead.Hash {
				t.Fatalf("head after replay %d %s, want %d %s", h.Seq, h.Hash, wantHead.Seq, wantHead.Hash)
			}
			// The log continues after the restart.
			e.do(e.as(ann).Put(ctx, file("ann@example.com/after", 1)))
			if h2 := e.do2(e.s.Head(ctx, ann)); h2.Seq != h.Seq+1 {
				t.Fatalf("head after append %d, want %d", h2.Seq, h.Seq+1)
			}
		})
	}
}

func (e *env) do2(h *dirlog.Head, err error) *dirlog.Head {
	e.t.Helper()
	if err != nil {
		e.t.Fatal(err)
	}
	return h
}

func TestDamagedTail(t *testing.T) {
	for _, k := range storeKinds() {
		t.Run(k.name, func(t *testing.T) {
			store := k.new(t)
			e := newEnv(t, store)
			e.setup()
			ctx := e.ctx
			want := e.dump(ann) // State after entry 5.
			marks, err := store.(Marker).Marks(ctx)
			if err != nil {
				t.Fatal(err)
			}
			e.do(e.as(ann).Put(ctx, file("ann@example.com/docs/last", 100)))
			good := k.bytes(t, store, ann)
			goodMarks, err := store.(Marker).Marks(ctx)
			if err != nil {
				t.Fatal(err)
			}
			e.s.Close()
			// A crash tears the last record before the host acknowledged
			// (and marked) it.
			if err := store.(Marker).Mark(ctx, ann, marks[ann]); err != nil {
				t.Fatal(err)
			}

			// A torn last write.
			k.set(t, store, ann, good[:len(good)-7])
			e.open()
			if got := e.dump(ann); got != want {
				t.Fatalf("after torn tail:\n%s\nwant\n%s", got, want)
			}
			dmg := e.s.Damage()
			if len(dmg) != 1 || spindle.KindOf(dmg[0]) != spindle.Integrity {
				t.Fatalf("Damage = %v", dmg)
			}
			// The cut is durable: opening again finds a clean log.
			e.reopen()
			if len(e.s.Damage()) != 0 || e.dump(ann) != want {
				t.Fatal("cut not durable")
			}
			// Appends go on from the last valid entry.
			if d := e.do(e.as(ann).Put(ctx, file("ann@example.com/docs/last", 100))); d.Sequence != 6 {
				t.Fatalf("first entry after cut has sequence %d", d.Sequence)
			}
			e.s.Close()

			// A corrupted byte in the middle (entry 3) is damage, not a
			// torn write: the log is left as it is and not served, to
			// anyone, until the operator repairs it.
			bad := append([]byte(nil), good...)
			bad[len(bad)/2] ^= 0x40
			k.set(t, store, ann, bad)
			if err := store.(Marker).Mark(ctx, ann, goodMarks[ann]); err != nil {
				t.Fatal(err) // The host stored good's entries.
			}
			e.open()
			dmg = e.s.Damage()
			var d *Damage
			if len(dmg) != 1 || !errors.Is(dmg[0], spindle.Damaged) || !errors.As(dmg[0], &d) || d.Entry < 2 || d.Entry > 5 || d.Repaired {
				t.Fatalf("Damage = %v", dmg)
			}
			if string(k.bytes(t, store, ann)) != string(bad) {
				t.Fatal("the damaged log was changed before the operator decided")
			}
			_, err = e.s.Head(ctx, ann)
			wantKind(t, err, spindle.Damaged, "head of a damaged log")
			_, err = e.as(ann).Lookup(ctx, "ann@example.com/docs")
			wantKind(t, err, spindle.Damaged, "lookup in a damaged log")
			_, err = e.as(bob).Glob(ctx, "ann@example.com/*")
			wantKind(t, err, spindle.Damaged, "glob in a damaged log")
			_, err = e.as(ann).MakeDirectory(ctx, "ann@example.com/")
			wantKind(t, err, spindle.Damaged, "a fresh tree over a damaged log")
			_, err = e.as(ann).Put(ctx, file("ann@example.com/docs/more", 1))
			wantKind(t, err, spindle.Damaged, "append to a damaged log")
			e.s.Close()
			// The operator repairs it. One flipped byte is restored, since
			// the next entry names the damaged one's hash: nothing is lost.
			e.repair = []spindle.UserName{ann}
			e.open()
			e.repair = nil
			if dmg = e.s.Damage(); len(dmg) != 1 || !errors.Is(dmg[0], spindle.Damaged) {
				t.Fatalf("Damage after repair = %v", dmg)
			}
			if string(k.bytes(t, store, ann)) != string(good) {
				t.Fatal("repair did not restore the log")
			}
			if h := e.do2(e.s.Head(ctx, ann)); h.Seq != 6 {
				t.Fatalf("head after repair is %d, want 6", h.Seq)
			}
			e.s.Close()

			// Two bytes flipped in one record cannot be undone: the repair
			// keeps the entries that verify and moves the rest aside.
			bad = append([]byte(nil), good...)
			bad[len(bad)/2] ^= 0x40
			bad[len(bad)/2+1] ^= 0x40
			k.set(t, store, ann, bad)
			e.repair = []spindle.UserName{ann}
			e.open()
			e.repair = nil
			dmg = e.s.Damage()
			if len(dmg) != 1 || !errors.As(dmg[0], &d) || !d.Repaired || d.Kept == "" {
				t.Fatalf("Damage after repair = %v", dmg)
			}
			h := e.do2(e.s.Head(ctx, ann))
			if h.Seq != d.Entry-1 {
				t.Fatalf("head after repair is %d, want %d", h.Seq, d.Entry-1)
			}
			if k.cuts(t, store, ann) < 3 {
				t.Error("damaged bytes were not kept")
			}
			e.reopen()
			if len(e.s.Damage()) != 0 {
				t.Fatalf("repair not durable: %v", e.s.Damage())
			}
		})
	}
}

// appendRaw appends an entry to user's stored log behind the server's back.
func appendRaw(t *testing.T, k storeKind, store Store, user spindle.UserName, en *dirlog.Entry) {
	t.Helper()
	rec := dirlog.Record{Entry: en.Marshal()}
	k.set(t, store, user, dirlog.AppendFrame(k.bytes(t, store, user), rec.Marshal()))
}

func TestForgedAndUnauthorizedEntries(t *testing.T) {
	for _, k := range storeKinds() {
		t.Run(k.name, func(t *testing.T) {
			store := k.new(t)
			e := newEnv(t, store)
			e.setup()
			ctx := e.ctx
			want := e.dump(ann)
			h := e.do2(e.s.Head(ctx, ann))
			next := func(w spindle.UserName, name spindle.PathName) *dirlog.Entry {
				return &dirlog.Entry{Seq: h.Seq + 1, Prev: h.Hash, Time: spindle.Now(), Writer: w, Op: dirlog.OpPut,
					Entry: *withSeq(file(name, 4), w, h.Seq+1)}
			}
			// Signed by bob's key but claiming to be ann's.
			forged := next(ann, "ann@example.com/docs/forged")
			sig, _ := e.signers[bob].Sign(forged.SignedDigest())
			forged.Sig = sig
			_, err := e.s.Append(ctx, forged)
			wantKind(t, err, spindle.Integrity, "entry signed with the wrong key")
			// Signed by ann, then altered.
			altered := next(ann, "ann@example.com/docs/x")
			altered.Sign(e.signers[ann])
			altered.Entry.Size, altered.Entry.Blocks[0].Size = 5, 5
			_, err = e.s.Append(ctx, altered)
			wantKind(t, err, spindle.Integrity, "altered entry")
			// Properly signed by bob, who has no right in ann's tree.
			unauthorized := next(bob, "ann@example.com/docs/bob.txt")
			unauthorized.Sign(e.signers[bob])
			_, err = e.s.Append(ctx, unauthorized)
			wantKind(t, err, spindle.Private, "bob writing to ann's tree")
			// A writer with no key at all.
			nobody := newSigner(t, "nobody@example.com")
			stranger := next(nobody.UserName(), "ann@example.com/docs/n")
			stranger.Sign(nobody)
			_, err = e.s.Append(ctx, stranger)
			wantKind(t, err, spindle.Permission, "writer without a key")
			if e.dump(ann) != want {
				t.Fatal("refused entries changed the tree")
			}

			// The same entries written straight into the log are refused at
			// replay: the log is cut before them.
			for _, bad := range []*dirlog.Entry{forged, unauthorized} {
				e.s.Close()
				good := k.bytes(t, store, ann)
				appendRaw(t, k, store, ann, bad)
				e.open()
				dmg := e.s.Damage()
				if len(dmg) != 1 || !errors.Is(dmg[0], spindle.Damaged) || e.dump(ann) != "(no tree)" {
					t.Fatalf("Damage = %v", dmg)
				}
				e.s.Close()
				e.repair = []spindle.UserName{ann}
				e.open()
				e.repair = nil
				if got := e.dump(ann); got != want {
					t.Fatalf("replay accepted a bad entry:\n%s", got)
				}
				reports, err := dirlog.Audit(ctx, map[spindle.UserName][]byte{ann: append(good, dirlog.AppendFrame(nil, (&dirlog.Record{Entry: bad.Marshal()}).Marshal())...)}, e.keys, nil)
				if err != nil || len(reports) != 1 || reports[0].Err == nil || reports[0].Entries != h.Seq {
					t.Fatalf("Audit = %+v, %v", reports, err)
				}
			}
		})
	}
}

func withSeq(d *spindle.DirEntry, w spindle.UserName, seq int64) *spindle.DirEntry {
	d.Writer, d.Sequence = w, seq
	return d
}

func TestAudit(t *testing.T) {
	store := &MemStore{}
	e := newEnv(t, store)
	e.setup()
	e.do(e.as(bob).MakeDirectory(e.ctx, "bob@example.com/"))
	logs := map[spindle.UserName][]byte{ann: store.Bytes(ann), bob: store.Bytes(bob)}
	reports, err := dirlog.Audit(e.ctx, logs, e.keys, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(reports) != 2 || reports[0].User != ann || reports[0].Entries != 5 || reports[0].Err != nil || reports[1].Entries != 1 {
		t.Fatalf("Audit = %+v", reports)
	}
	h := e.do2(e.s.Head(e.ctx, ann))
	if reports[0].Head != h.Hash {
		t.Fatal("audit head differs from the server's")
	}
	// Swapping two entries breaks the chain.
	var recs [][]byte
	dirlog.ScanFrames(strings.NewReader(string(logs[ann])), 0, func(b []byte) error {
		recs = append(recs, append([]byte(nil), b...))
		return nil
	})
	var swapped []byte
	for _, i := range []int{0, 1, 3, 2, 4} {
		swapped = dirlog.AppendFrame(swapped, recs[i])
	}
	reports, _ = dirlog.Audit(e.ctx, map[spindle.UserName][]byte{ann: swapped}, e.keys, nil)
	if reports[0].Err == nil || reports[0].Entries != 2 || spindle.KindOf(reports[0].Err) != spindle.Integrity {
		t.Fatalf("Audit of swapped log = %+v", reports[0])
	}
}

func TestHead(t *testing.T) {
	e := newEnv(t, &MemStore{})
	h0 := e.do2(e.s.Head(e.ctx, ann))
	if h0.Seq != 0 || !h0.Hash.IsZero() {
		t.Fatalf("head of a missing log = %+v", h0)
	}
	e.setup()
	h := e.do2(e.s.Head(e.ctx, ann))
	if h.Seq != 5 || h.Host != e.host.HostID() {
		t.Fatalf("head = %+v", h)
	}
	if err := h.Verify(e.host); err != nil {
		t.Fatal(err)
	}
	if err := h.Verify(e.signers[ann]); err == nil {
		t.Fatal("head verified with the wrong key")
	}
	dec, err := dirlog.UnmarshalHead(h.Marshal())
	if err != nil || dec.Verify(e.host) != nil || dec.Seq != h.Seq || dec.Hash != h.Hash || dec.User != ann {
		t.Fatalf("head round trip: %+v, %v", dec, err)
	}
	if _, err := dirlog.UnmarshalHead(h.Marshal()[:20]); err == nil {
		t.Fatal("truncated head accepted")
	}
	tampered := *h
	tampered.Seq++
	wantKind(t, tampered.Verify(e.host), spindle.Integrity, "tampered head")
	if err := dirlog.CheckHead(h0, h); err != nil {
		t.Fatal(err)
	}
	wantKind(t, dirlog.CheckHead(h, h0), spindle.Integrity, "rollback")
	fork := *h
	fork.Hash[0] ^= 1
	wantKind(t, dirlog.CheckHead(h, &fork), spindle.Integrity, "fork")
}

func TestConcurrentWriters(t *testing.T) {
	e := newEnv(t, &MemStore{})
	e.setup()
	ctx := e.ctx
	e.do(e.as(ann).Put(ctx, control("ann@example.com/Access", "*: ann@example.com bob@example.com cat@example.com\n")))
	e.do(e.as(bob).MakeDirectory(ctx, "bob@example.com/"))
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	events, err := e.as(ann).Watch(wctx, "ann@example.com/", -1)
	if err != nil {
		t.Fatal(err)
	}
	const per = 15
	for _, u := range []spindle.UserName{ann, bob, cat} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := e.as(u)
			for i := 0; i < per; i++ {
				if _, err := c.Put(ctx, file(spindle.PathName(fmt.Sprintf("ann@example.com/docs/%s-%d", u, i)), 10)); err != nil {
					errs <- err
					return
				}
				if _, err := c.Glob(ctx, "ann@example.com/docs/*"); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	// Bob's own tree grows in parallel.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < per; i++ {
			if _, err := e.as(bob).MakeDirectory(ctx, spindle.PathName(fmt.Sprintf("bob@example.com/d%d", i))); err != nil {
				errs <- err
				return
			}
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	h := e.do2(e.s.Head(ctx, ann))
	if h.Seq != 6+3*per {
		t.Fatalf("head at %d, want %d", h.Seq, 6+3*per)
	}
	seen := 0
	timeout := time.After(10 * time.Second)
	for seen < 3*per {
		select {
		case ev := <-events:
			if ev.Err != nil {
				t.Fatal(ev.Err)
			}
			seen++
		case <-timeout:
			t.Fatalf("watch delivered %d of %d events", seen, 3*per)
		}
	}
	want := e.dump(ann)
	e.reopen()
	if e.dump(ann) != want {
		t.Fatal("replay after concurrent writes differs")
	}
}

func TestWatch(t *testing.T) {
	e := newEnv(t, &MemStore{})
	e.setup()
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	c := e.as(ann)
	e.do(c.Put(ctx, control("ann@example.com/docs/Access", "*: ann@example.com\nl: bob@example.com\n")))

	next := func(ch <-chan spindle.Event) spindle.Event {
		t.Helper()
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatal("watch channel closed")
			}
			if ev.Err != nil {
				t.Fatal(ev.Err)
			}
			return ev
		case <-time.After(5 * time.Second):
			t.Fatal("no event")
		}
		return spindle.Event{}
	}
	// Current state first.
	ch, err := c.Watch(ctx, "ann@example.com/docs/sub", 0)
	if err != nil {
		t.Fatal(err)
	}
	if ev := next(ch); ev.Entry.Name != "ann@example.com/docs/sub" {
		t.Fatalf("first event %s", ev.Entry.Name)
	}
	if ev := next(ch); ev.Entry.Name != "ann@example.com/docs/sub/b.txt" || len(ev.Entry.Blocks) != 3 {
		t.Fatalf("second event %+v", ev.Entry)
	}
	// Bob sees changes he may list, without blocks.
	bch, err := e.as(bob).Watch(ctx, "ann@example.com/docs", -1)
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.as(cat).Watch(ctx, "ann@example.com/docs", -1)
	wantKind(t, err, spindle.Private, "cat watching")

	e.do(c.Put(ctx, file("ann@example.com/docs/sub/c.txt", 5)))
	e.do(c.Put(ctx, file("ann@example.com/elsewhere", 5)))
	e.do(c.Delete(ctx, "ann@example.com/docs/sub/c.txt"))
	if ev := next(ch); ev.Entry.Name != "ann@example.com/docs/sub/c.txt" || ev.Delete {
		t.Fatalf("put event %+v", ev)
	}
	if ev := next(ch); ev.Entry.Name != "ann@example.com/docs/sub/c.txt" || !ev.Delete || ev.Entry.Sequence != 9 {
		t.Fatalf("delete event %+v", ev)
	}
	ev := next(bch)
	if ev.Entry.Name != "ann@example.com/docs/sub/c.txt" || !ev.Entry.Attr.IsIncomplete() || ev.Entry.Blocks != nil {
		t.Fatalf("bob's event %+v", ev.Entry)
	}
	// After a restart, history comes from the log.
	e.reopen()
	hch, err := e.as(ann).Watch(ctx, "ann@example.com/docs/sub", 2)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for i := 0; i < 4; i++ {
		ev := next(hch)
		names = append(names, fmt.Sprintf("%d:%s:%v", ev.Entry.Sequence, strings.TrimPrefix(string(ev.Entry.Name), "ann@example.com/docs/"), ev.Delete))
	}
	if got := strings.Join(names, " "); got != "4:sub:false 5:sub/b.txt:false 7:sub/c.txt:false 9:sub/c.txt:true" {
		t.Fatalf("history = %s", got)
	}
	// And then live changes follow.
	e.do(e.as(ann).Put(ctx, file("ann@example.com/docs/sub/d.txt", 1)))
	if ev := next(hch); ev.Entry.Name != "ann@example.com/docs/sub/d.txt" || ev.Entry.Sequence != 10 {
		t.Fatalf("live event after history %+v", ev.Entry)
	}
	cancel()
	for range hch {
	}

	// Renaming a hidden directory reveals nothing to a watcher.
	ctx, cancel = context.WithCancel(e.ctx)
	defer cancel()
	c = e.as(ann)
	e.do(c.Put(ctx, control("ann@example.com/Access", "*: ann@example.com\nl: bob@example.com\n")))
	e.do(c.MakeDirectory(ctx, "ann@example.com/secret"))
	e.do(c.Put(ctx, control("ann@example.com/secret/Access", "*: ann@example.com\n")))
	e.do(c.Put(ctx, file("ann@example.com/secret/x", 1)))
	bch, err = e.as(bob).Watch(ctx, "ann@example.com/", -1)
	if err != nil {
		t.Fatal(err)
	}
	e.do(c.Rename(ctx, "ann@example.com/secret", "ann@example.com/hidden"))
	e.do(c.Put(ctx, file("ann@example.com/visible", 1)))
	// Bob may list the root, so he sees the directory go and come, as a
	// listing of the root shows it; nothing inside it.
	var seen []string
	for len(seen) < 3 {
		ev := next(bch)
		seen = append(seen, fmt.Sprintf("%s:%v", ev.Entry.Name, ev.Delete))
	}
	if got := strings.Join(seen, " "); got != "ann@example.com/secret:true ann@example.com/hidden:false ann@example.com/visible:false" {
		t.Fatalf("bob saw %s", got)
	}
	// Closing the server ends its watches.
	e.s.Close()
	select {
	case _, ok := <-bch:
		if ok {
			t.Fatal("event after close")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("watch not ended by Close")
	}
}

func TestKeyRotation(t *testing.T) {
	store := &MemStore{}
	e := newEnv(t, store)
	e.setup()
	want := e.dump(ann)
	old := e.signers[ann]
	h, err := e.s.Head(e.ctx, ann)
	if err != nil {
		t.Fatal(err)
	}
	rotatedAt := h.Seq // The DirSeq of the rotation's key record.
	e.s.Close()
	e.mu.Lock()
	e.signers[ann] = newSigner(t, ann)
	e.mu.Unlock()

	// Without a key history, entries signed with the old key can be
	// neither confirmed nor cut: New refuses to open.
	_, err = New(e.ctx, store, Config{Keys: e.keys})
	wantKind(t, err, spindle.Integrity, "replay after rotation without history")
	if got := len(store.Cuts(ann)); got != 0 {
		t.Fatalf("%d cuts made", got)
	}
	// With a history that confirms the old key, the tree comes back whole.
	e.history = func(ctx context.Context, u spindle.UserName) ([]dirlog.HeldKey, error) {
		k, _ := e.keys(ctx, u)
		if u == ann {
			return []dirlog.HeldKey{{Key: old.PublicKey(), Until: rotatedAt}, {Key: k, Until: -1}}, nil
		}
		return []dirlog.HeldKey{{Key: k, Until: -1}}, nil
	}
	e.open()
	if got := e.dump(ann); got != want || len(e.s.Damage()) != 0 {
		t.Fatalf("replay with key history:\n%s\ndamage %v", got, e.s.Damage())
	}
	// The old key signs no more.
	_, err = e.s.For(old).Put(e.ctx, file("ann@example.com/docs/old-key", 1))
	wantKind(t, err, spindle.Integrity, "append signed with the old key")
	e.do(e.as(ann).Put(e.ctx, file("ann@example.com/docs/new-key", 1)))
	want = e.dump(ann)
	e.reopen()
	if e.dump(ann) != want {
		t.Fatal("replay across the rotation differs")
	}
	// A log holding an entry of ann's tree signed with the old key beyond
	// the rotation's cutoff (here: a cutoff one entry earlier) is damaged
	// there, and not served until the operator repairs it: the replaced
	// key signs nothing after the rotation.
	e.s.Close()
	e.history = func(ctx context.Context, u spindle.UserName) ([]dirlog.HeldKey, error) {
		k, _ := e.keys(ctx, u)
		if u == ann {
			return []dirlog.HeldKey{{Key: old.PublicKey(), Until: rotatedAt - 1}, {Key: k, Until: -1}}, nil
		}
		return []dirlog.HeldKey{{Key: k, Until: -1}}, nil
	}
	e.open()
	if d := e.s.Damage(); len(d) != 1 || !errors.Is(d[0], spindle.Damaged) || !strings.Contains(d[0].Error(), "replaced") {
		t.Fatalf("entry past the cutoff accepted: damage %v", d)
	}
	if h, err := e.s.Head(e.ctx, ann); !errors.Is(err, spindle.Damaged) {
		t.Fatalf("head of a log with an entry past the cutoff: %+v, %v; want Damaged", h, err)
	}
	// A history that does not know the key: the entries are invalid.
	e.s.Close()
	e.history = func(ctx context.Context, u spindle.UserName) ([]dirlog.HeldKey, error) {
		k, _ := e.keys(ctx, u)
		return []dirlog.HeldKey{{Key: k, Until: -1}}, nil
	}
	e.open()
	if len(e.s.Damage()) != 1 || e.dump(ann) != "(no tree)" {
		t.Fatalf("unknown old key accepted: %v\n%s", e.s.Damage(), e.dump(ann))
	}
}

func TestWatchHistoryFromDisk(t *testing.T) {
	dir := t.TempDir()
	e := newEnv(t, &MemStore{}) // For its signers and keys.
	e.s.Close()
	s, err := Open(e.ctx, dir, Config{Keys: e.keys, Host: e.host})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.maxRecent = 3
	c := s.For(e.signers[ann])
	e.do(c.MakeDirectory(e.ctx, "ann@example.com/"))
	for i := 0; i < 10; i++ {
		e.do(c.Put(e.ctx, file(spindle.PathName(fmt.Sprintf("ann@example.com/f%d", i)), 1)))
	}
	v := s.view()
	kept := len(v.served(ann).recent)
	v.release()
	if kept != 3 {
		t.Fatalf("%d entries' events kept, want 3", kept)
	}
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	ch, err := c.Watch(ctx, "ann@example.com/", 3)
	if err != nil {
		t.Fatal(err)
	}
	for want := int64(3); want <= 11; want++ {
		select {
		case ev := <-ch:
			if ev.Err != nil || ev.Entry.Sequence != want || ev.Entry.Name != spindle.PathName(fmt.Sprintf("ann@example.com/f%d", want-2)) {
				t.Fatalf("event %+v, want f%d at %d", ev, want-2, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no event for sequence %d", want)
		}
	}
}
