package host

import (
	"testing"

	"spindle.dev/dirlog"

	"spindle.dev"
)

// Entries moved by a rename keep the name their writer signed, so that
// readers can still verify the writer's signature; an entry written at its
// own name has none.
func TestRenameKeepsSignedName(t *testing.T) {
	e := newEnv(t, new(MemStore))
	e.setup()
	c := e.as(ann)
	e.do(c.Rename(e.ctx, "ann@example.com/docs", "ann@example.com/moved"))
	for name, signed := range map[spindle.PathName]spindle.PathName{
		"ann@example.com/moved/a.txt":     "ann@example.com/docs/a.txt",
		"ann@example.com/moved/sub/b.txt": "ann@example.com/docs/sub/b.txt",
	} {
		d := e.do(c.Lookup(e.ctx, name))
		if d.SignedName != signed {
			t.Errorf("%s: SignedName %q, want %q", name, d.SignedName, signed)
		}
	}
	// Moving again keeps the original signed name.
	e.do(c.Rename(e.ctx, "ann@example.com/moved/a.txt", "ann@example.com/a2.txt"))
	if d := e.do(c.Lookup(e.ctx, "ann@example.com/a2.txt")); d.SignedName != "ann@example.com/docs/a.txt" {
		t.Errorf("after a second move: SignedName %q", d.SignedName)
	}
	// Replay reproduces it.
	e.reopen()
	if d := e.do(e.as(ann).Lookup(e.ctx, "ann@example.com/a2.txt")); d.SignedName != "ann@example.com/docs/a.txt" {
		t.Errorf("after replay: SignedName %q", d.SignedName)
	}
	// A fresh put has none.
	c = e.as(ann)
	e.do(c.Put(e.ctx, file("ann@example.com/fresh", 5)))
	if d := e.do(c.Lookup(e.ctx, "ann@example.com/fresh")); d.SignedName != "" {
		t.Errorf("fresh file: SignedName %q", d.SignedName)
	}
}

// The owner may re-wrap a file's keys (same blocks, new packdata) without
// the write right, but may not change its contents.
func TestOwnerRewrapWithoutWrite(t *testing.T) {
	e := newEnv(t, new(MemStore))
	e.setup()
	c := e.as(ann)
	e.do(c.Put(e.ctx, control("ann@example.com/docs/Access", "read, list: bob@example.com\n")))
	old := e.do(c.Lookup(e.ctx, "ann@example.com/docs/a.txt"))

	rewrap := file("ann@example.com/docs/a.txt", 10)
	rewrap.Packdata = []byte("wrapped for bob too")
	if _, err := c.Put(e.ctx, rewrap); err != nil {
		t.Fatalf("owner re-wrap without write: %v", err)
	}
	if d := e.do(c.Lookup(e.ctx, "ann@example.com/docs/a.txt")); string(d.Packdata) != "wrapped for bob too" || d.Sequence <= old.Sequence {
		t.Errorf("re-wrap not applied: %+v", d)
	}
	changed := file("ann@example.com/docs/a.txt", 11)
	_, err := c.Put(e.ctx, changed)
	wantKind(t, err, spindle.Permission, "owner changing contents without write")

	// Another user with read may not re-wrap.
	_, err = e.as(bob).Put(e.ctx, rewrap)
	wantKind(t, err, spindle.Permission, "non-owner re-wrap")
}

// Answers carry the signed log entries a reader needs to check an entry's
// name (DirEntry.Signed): the entry that put an Access or Group file or a
// link, then every rename that moved the entry, oldest first. Replay
// reproduces them, a new put drops them, and a writer can set neither
// them nor a signed name.
func TestSignedRecords(t *testing.T) {
	e := newEnv(t, new(MemStore))
	e.setup()
	c := e.as(ann)
	e.do(c.PutLink(e.ctx, "ann@example.com/docs/a.txt", "ann@example.com/docs/l"))
	e.do(c.Put(e.ctx, control("ann@example.com/docs/Access", "*: ann@example.com\nread: bob@example.com\n")))
	e.do(c.Rename(e.ctx, "ann@example.com/docs", "ann@example.com/moved"))

	// check checks that d carries records of the given operations, the
	// first naming first, each signed by ann.
	check := func(d *spindle.DirEntry, first spindle.PathName, ops ...dirlog.Operation) {
		t.Helper()
		if len(d.Signed) != len(ops) {
			t.Fatalf("%s: %d signed records, want %d", d.Name, len(d.Signed), len(ops))
		}
		for i, b := range d.Signed {
			r, err := dirlog.UnmarshalEntry(b)
			if err != nil {
				t.Fatal(err)
			}
			if r.Op != ops[i] {
				t.Errorf("%s: record %d is a %s, want %s", d.Name, i, r.Op, ops[i])
			}
			if i == 0 && r.Entry.Name != first {
				t.Errorf("%s: first record is of %s, want %s", d.Name, r.Entry.Name, first)
			}
			if err := spindle.Verify(e.signers[ann].PublicKey(), r.SignedDigest(), r.Sig); err != nil {
				t.Errorf("%s: record %d: %v", d.Name, i, err)
			}
		}
	}
	lookups := func() {
		t.Helper()
		acc := e.do(c.Lookup(e.ctx, "ann@example.com/moved/Access"))
		check(acc, "ann@example.com/docs/Access", dirlog.OpPut, dirlog.OpRename)
		if r, _ := dirlog.UnmarshalEntry(acc.Signed[0]); string(r.Entry.Inline) != "*: ann@example.com\nread: bob@example.com\n" {
			t.Errorf("Access file's record holds %q", r.Entry.Inline)
		}
		check(e.do(c.Lookup(e.ctx, "ann@example.com/moved/l")), "ann@example.com/docs/l", dirlog.OpLink, dirlog.OpRename)
		check(e.do(c.Lookup(e.ctx, "ann@example.com/moved/a.txt")), "ann@example.com/docs", dirlog.OpRename)
		check(e.do(c.WhichAccess(e.ctx, "ann@example.com/moved/sub/b.txt")), "ann@example.com/docs/Access", dirlog.OpPut, dirlog.OpRename)
		es, err := c.Glob(e.ctx, "ann@example.com/moved/sub/*")
		if err != nil || len(es) != 1 {
			t.Fatalf("glob: %v, %d entries", err, len(es))
		}
		check(es[0], "ann@example.com/docs", dirlog.OpRename)
	}
	lookups()
	e.reopen()
	c = e.as(ann)
	lookups()

	// A new put at the name drops the records; what a writer sends in
	// Signed is not kept.
	f := file("ann@example.com/moved/a.txt", 10)
	f.Signed = [][]byte{[]byte("made up")}
	e.do(c.Put(e.ctx, f))
	check(e.do(c.Lookup(e.ctx, "ann@example.com/moved/a.txt")), "")
	f = file("ann@example.com/moved/b.txt", 10)
	f.SignedName = "ann@example.com/moved/a.txt"
	_, err := c.Put(e.ctx, f)
	wantKind(t, err, spindle.Invalid, "put with a signed name")
}
