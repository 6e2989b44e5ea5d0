package host

import (
	"slices"
	"testing"

	"spindle.dev"
)

// Refs lists the blocks of every current file once per user: a deleted
// file's blocks go, a renamed file's stay, blocks shared by two files
// appear once, and each user's refs come separately.
func TestRefs(t *testing.T) {
	e := newEnv(t, &MemStore{})
	e.setup() // a.txt (1 block), sub/b.txt (3 blocks).
	c := e.as(ann)
	shared := file("ann@example.com/docs/a2.txt", 10)
	shared.Blocks = file("ann@example.com/docs/a.txt", 10).Blocks
	e.do(c.Put(e.ctx, shared))
	e.do(c.Rename(e.ctx, "ann@example.com/docs/sub", "ann@example.com/docs/moved"))
	bobc := e.as(bob)
	e.do(bobc.MakeDirectory(e.ctx, "bob@example.com/"))
	e.do(bobc.Put(e.ctx, file("bob@example.com/x", 5)))

	got := func() map[spindle.UserName][]spindle.Ref {
		m := map[spindle.UserName][]spindle.Ref{}
		damaged, err := e.s.Refs(e.ctx, func(u spindle.UserName, refs []spindle.Ref) error {
			m[u] = slices.Sorted(slices.Values(refs))
			return nil
		})
		if err != nil || len(damaged) != 0 {
			t.Fatalf("Refs: %v, damaged %v", err, damaged)
		}
		return m
	}
	refsOf := func(ds ...*spindle.DirEntry) []spindle.Ref {
		var out []spindle.Ref
		for _, d := range ds {
			for _, b := range d.Blocks {
				if !slices.Contains(out, b.Ref) {
					out = append(out, b.Ref)
				}
			}
		}
		slices.Sort(out)
		return out
	}
	a := file("ann@example.com/docs/a.txt", 10)
	b := file("ann@example.com/docs/sub/b.txt", 3<<20)
	m := got()
	if want := refsOf(a, b); !slices.Equal(m[ann], want) {
		t.Fatalf("ann's refs %v, want %v", m[ann], want)
	}
	if want := refsOf(file("bob@example.com/x", 5)); !slices.Equal(m[bob], want) {
		t.Fatalf("bob's refs %v, want %v", m[bob], want)
	}
	// Deleting one of two files sharing a block keeps the block;
	// deleting the other too drops it.
	e.do(c.Delete(e.ctx, "ann@example.com/docs/a.txt"))
	if m := got(); !slices.Equal(m[ann], refsOf(a, b)) {
		t.Fatalf("after deleting one of two files sharing a block: %v", m[ann])
	}
	e.do(c.Delete(e.ctx, "ann@example.com/docs/a2.txt"))
	e.do(c.Delete(e.ctx, "ann@example.com/docs/moved/b.txt"))
	if m := got(); len(m[ann]) != 0 {
		t.Fatalf("after deleting every file: %v", m[ann])
	}
}
