package host

import (
	"testing"
	"time"

	"spindle.dev"
)

// TestPastReads checks the host's side of reads of the past by others:
// the state a sequence, a negative count or a time names; the rights of
// then and of now both required; the proof against a head of that state;
// and, after a compaction, NotExist for a state before the checkpoint
// and the same answers for those after it.
func TestPastReads(t *testing.T) {
	e := newEnv(t, &MemStore{})
	c := e.as(ann)
	ctx := e.ctx
	e.do(c.MakeDirectory(ctx, "ann@example.com/"))
	e.do(c.MakeDirectory(ctx, "ann@example.com/docs"))
	e.do(c.Put(ctx, control("ann@example.com/docs/Access", "read: bob@example.com\n*: ann@example.com\n")))
	e.do(c.Put(ctx, version("ann@example.com/docs/x", "X1")))
	s1 := e.do(c.Lookup(ctx, "ann@example.com/docs/x")).Sequence
	time.Sleep(5 * time.Millisecond)
	t1 := time.Now()
	time.Sleep(5 * time.Millisecond)
	e.do(c.Put(ctx, version("ann@example.com/docs/x", "X2")))
	s2 := s1 + 1
	e.do(c.MakeDirectory(ctx, "ann@example.com/own"))
	e.do(c.Put(ctx, control("ann@example.com/own/Access", "*: ann@example.com\n")))
	e.do(c.Put(ctx, version("ann@example.com/own/y", "Y1")))
	s3 := e.do(c.Lookup(ctx, "ann@example.com/own/y")).Sequence
	e.do(c.Put(ctx, control("ann@example.com/own/Access", "read: bob@example.com\n*: ann@example.com\n")))
	head := s3 + 1

	read := func(seq int64, when time.Time, name spindle.PathName) (spindle.Ref, int64, error) {
		t.Helper()
		d, pr, err := e.s.LookupProvedAt(ctx, bob, name, seq, when)
		if err != nil {
			return "", 0, err
		}
		if pr == nil || pr.Head == nil {
			t.Fatalf("%s at %d: no proof", name, seq)
		}
		if err := pr.Verify(); err != nil {
			t.Fatalf("%s at %d: proof: %v", name, seq, err)
		}
		if err := pr.Head.Verify(e.host); err != nil {
			t.Fatalf("%s at %d: head: %v", name, seq, err)
		}
		return d.Blocks[0].Ref, pr.Head.Seq, nil
	}
	check := func(what string) {
		t.Helper()
		for _, tc := range []struct {
			seq  int64
			when time.Time
			want spindle.Ref
			at   int64
		}{
			{s1, time.Time{}, "X1", s1},
			{s2, time.Time{}, "X2", s2},
			{s2 - head, time.Time{}, "X2", s2}, // Counted back from the head.
			{0, t1, "X1", s1},                  // At a time.
		} {
			ref, at, err := read(tc.seq, tc.when, "ann@example.com/docs/x")
			if err != nil || ref != tc.want || at != tc.at {
				t.Errorf("%s: x at %d/%v: %s at %d, %v; want %s at %d", what, tc.seq, tc.when, ref, at, err, tc.want, tc.at)
			}
		}
		// Readable now, not then.
		_, _, err := read(s3, time.Time{}, "ann@example.com/own/y")
		wantKind(t, err, spindle.Private, what+": y, readable now but not then")
		// Past the head.
		_, _, err = read(head+1, time.Time{}, "ann@example.com/docs/x")
		wantKind(t, err, spindle.NotExist, what+": past the head")
		// Cat has no right anywhere in the tree.
		_, _, err = e.s.LookupProvedAt(ctx, cat, "ann@example.com/docs/x", s1, time.Time{})
		wantKind(t, err, spindle.Private, what+": cat")
	}
	check("whole log")

	// Readable then, not now.
	e.do(c.Put(ctx, control("ann@example.com/docs/Access", "*: ann@example.com\n")))
	_, _, err := read(s2, time.Time{}, "ann@example.com/docs/x")
	wantKind(t, err, spindle.Private, "x, readable then but not now")
	e.do(c.Put(ctx, control("ann@example.com/docs/Access", "read: bob@example.com\n*: ann@example.com\n")))
	head += 2

	// A compaction drops every state before the head.
	if _, err := e.s.Compact(ctx, ann); err != nil {
		t.Fatal(err)
	}
	_, _, err = read(s1, time.Time{}, "ann@example.com/docs/x")
	wantKind(t, err, spindle.NotExist, "a state before the checkpoint")
	if ref, at, err := read(head, time.Time{}, "ann@example.com/docs/x"); err != nil || ref != "X2" || at != head {
		t.Errorf("the checkpoint's own state: %s at %d, %v", ref, at, err)
	}
}
