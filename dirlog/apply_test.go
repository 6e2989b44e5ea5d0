package dirlog

import (
	"testing"

	"spindle.dev"
)

// TestApplyRefuses checks that Apply refuses, with Invalid and leaving
// the tree as it was, an entry that does not fit the tree, rather than
// panic.
func TestApplyRefuses(t *testing.T) {
	tr := NewTree(ann)
	seq := int64(0)
	apply := func(op Operation, d spindle.DirEntry, newName spindle.PathName) error {
		e := &Entry{Seq: seq + 1, Prev: tr.Head, Op: op, Entry: d, NewName: newName}
		_, err := tr.Apply(e)
		if err == nil {
			seq++
		}
		return err
	}
	dir := func(name spindle.PathName) spindle.DirEntry {
		return spindle.DirEntry{Name: name, Attr: spindle.AttrDirectory}
	}
	if err := apply(OpPut, *file("ann@example.com/a", 1), ""); err == nil {
		t.Fatal("put before the root: no error")
	} else {
		wantKind(t, err, spindle.Invalid, "put before the root")
	}
	for _, d := range []spindle.DirEntry{dir("ann@example.com/"), dir("ann@example.com/d"), *file("ann@example.com/d/f", 1)} {
		if err := apply(OpMkdir, d, ""); d.Attr.IsDir() && err != nil {
			t.Fatal(err)
		} else if !d.Attr.IsDir() {
			if err := apply(OpPut, d, ""); err != nil {
				t.Fatal(err)
			}
		}
	}
	before := tr.Seq
	for _, tc := range []struct {
		what    string
		op      Operation
		d       spindle.DirEntry
		newName spindle.PathName
	}{
		{"put in a missing directory", OpPut, *file("ann@example.com/x/f", 1), ""},
		{"put below a file", OpPut, *file("ann@example.com/d/f/g", 1), ""},
		{"delete of a missing item", OpDelete, spindle.DirEntry{Name: "ann@example.com/d/nope"}, ""},
		{"delete of the root", OpDelete, spindle.DirEntry{Name: "ann@example.com/"}, ""},
		{"rename of a missing item", OpRename, spindle.DirEntry{Name: "ann@example.com/nope"}, "ann@example.com/new"},
		{"rename into itself", OpRename, spindle.DirEntry{Name: "ann@example.com/d"}, "ann@example.com/d/e"},
		{"rename to a missing directory", OpRename, spindle.DirEntry{Name: "ann@example.com/d/f"}, "ann@example.com/x/f"},
		{"unknown operation", Operation(99), *file("ann@example.com/d/g", 1), ""},
	} {
		wantKind(t, apply(tc.op, tc.d, tc.newName), spindle.Invalid, tc.what)
		if tr.Seq != before {
			t.Fatalf("%s: tree moved to %d", tc.what, tr.Seq)
		}
	}
	if n := tr.Lookup("ann@example.com/d/f"); n == nil {
		t.Fatal("refused entries changed the tree")
	}
}
