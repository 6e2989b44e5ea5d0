package dirlog

import (
	"testing"

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
