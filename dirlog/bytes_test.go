package dirlog

import (
	"testing"

	"spindle.dev"
)

// A tree counts the bytes of its files as entries put, replace, move and
// delete them, and a tree folded from its checkpoint counts the same.
func TestTreeBytes(t *testing.T) {
	tr := NewTree(ann)
	add := func(op Operation, d spindle.DirEntry, newName spindle.PathName, want int64) {
		t.Helper()
		d.Writer, d.Sequence = ann, tr.Seq+1
		e := &Entry{Seq: tr.Seq + 1, Prev: tr.Head, Op: op, Writer: ann, Entry: d, NewName: newName}
		if _, err := tr.Apply(e); err != nil {
			t.Fatal(err)
		}
		if tr.Bytes != want {
			t.Fatalf("after %v of %s: %d bytes, want %d", op, d.Name, tr.Bytes, want)
		}
	}
	add(OpMkdir, spindle.DirEntry{Name: "ann@example.com/", Attr: spindle.AttrDirectory}, "", 0)
	add(OpMkdir, spindle.DirEntry{Name: "ann@example.com/d", Attr: spindle.AttrDirectory}, "", 0)
	add(OpPut, *file("ann@example.com/d/a", 3<<20), "", 3<<20)
	add(OpPut, *file("ann@example.com/b", 100), "", 3<<20+100)
	add(OpPut, *file("ann@example.com/d/a", 1000), "", 1100)                              // Replaced.
	add(OpRename, spindle.DirEntry{Name: "ann@example.com/d"}, "ann@example.com/e", 1100) // Moved.
	add(OpDelete, spindle.DirEntry{Name: "ann@example.com/b"}, "", 1000)
	ft, err := tr.Checkpoint().Fold()
	if err != nil {
		t.Fatal(err)
	}
	if ft.Bytes != tr.Bytes {
		t.Fatalf("folded from its checkpoint, the tree counts %d bytes, not %d", ft.Bytes, tr.Bytes)
	}
}
