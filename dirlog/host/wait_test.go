package host

import (
	"bytes"
	"maps"
	"slices"
	"testing"

	"spindle.dev/dirlog"

	"spindle.dev"
)

// A host whose key state cannot yet tell the keys that signed its logs
// (a restarted key-cluster member whose replica has not caught up, an
// unreachable cluster) neither calls the logs damaged nor serves them,
// nor lets anyone start a new tree over them: they wait, with those whose
// decisions used them, until Resume finds the keys, and then are served
// exactly as before.
func TestLogsWaitForKeys(t *testing.T) {
	for _, c := range []struct {
		what string
		err  error
	}{
		{"a replica that has not caught up", spindle.E(spindle.NotExist, bob, "no such user")},
		{"an unreachable key cluster", spindle.E(spindle.IO, "all dials failed")},
	} {
		t.Run(c.what, func(t *testing.T) {
			e := newEnv(t, new(MemStore))
			ctx := e.ctx
			e.setup()
			b := e.as(bob)
			e.do(b.MakeDirectory(ctx, "bob@example.com/"))
			e.do(b.MakeDirectory(ctx, "bob@example.com/Group"))
			e.do(b.Put(ctx, control("bob@example.com/Group/friends", "cat@example.com\n")))
			a := e.as(ann)
			e.do(a.Put(ctx, control("ann@example.com/Access", "*: ann@example.com\ncreate, write, read, list: bob@example.com/Group/friends\n")))
			// cat's put was decided by bob's group: ann's log depends on bob's.
			e.do(e.as(cat).Put(ctx, file("ann@example.com/docs/c.txt", 5)))
			e.do(e.as(cat).MakeDirectory(ctx, "cat@example.com/"))
			before := map[spindle.UserName]string{ann: e.dump(ann), bob: e.dump(bob), cat: e.dump(cat)}

			e.keyErr = map[spindle.UserName]error{bob: c.err}
			e.reopen()
			a, b = e.as(ann), e.as(bob)
			if d := e.s.Damage(); len(d) != 0 {
				t.Fatalf("damage reported while keys cannot be learnt: %v", d)
			}
			waiting := e.s.Waiting()
			if got := slices.Sorted(maps.Keys(waiting)); !slices.Equal(got, []spindle.UserName{ann, bob}) {
				t.Fatalf("waiting: %v, want ann (whose put used bob's group) and bob", waiting)
			}
			if got := e.dump(cat); got != before[cat] {
				t.Errorf("cat's log, which needs no key of bob's, is not served as before:\n%s", got)
			}
			_, err := a.Lookup(ctx, "ann@example.com/docs/a.txt")
			wantKind(t, err, spindle.Transient, "lookup in a waiting tree")
			_, err = a.MakeDirectory(ctx, "ann@example.com/new")
			wantKind(t, err, spindle.Transient, "append to a waiting tree")
			_, err = b.MakeDirectory(ctx, "bob@example.com/")
			wantKind(t, err, spindle.Transient, "a new root over a waiting tree")

			// Still not decidable: nothing changes.
			if settled, err := e.s.Resume(ctx); err != nil || len(settled) != 0 {
				t.Fatalf("Resume with the keys still missing: %v, %v", settled, err)
			}
			e.mu.Lock()
			e.keyErr = nil
			e.mu.Unlock()
			settled, err := e.s.Resume(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if slices.Sort(settled); !slices.Equal(settled, []spindle.UserName{ann, bob}) {
				t.Fatalf("Resume settled %v, want ann and bob", settled)
			}
			if len(e.s.Waiting()) != 0 || len(e.s.Damage()) != 0 {
				t.Fatalf("after Resume: waiting %v, damage %v", e.s.Waiting(), e.s.Damage())
			}
			for u, want := range before {
				if got := e.dump(u); got != want {
					t.Errorf("%s's tree after Resume:\n%s\nwant:\n%s", u, got, want)
				}
			}
			e.do(a.Put(ctx, file("ann@example.com/docs/d.txt", 1)))
			e.do(a.Lookup(ctx, "ann@example.com/docs/c.txt"))
		})
	}
}

// A log that waited for the keys and turns out shorter than what the host
// stored is damaged when Resume decides it, as it would have been at
// start: never served as an older state.
func TestResumeChecksMarks(t *testing.T) {
	st := new(MemStore)
	e := newEnv(t, st)
	ctx := e.ctx
	e.setup()
	e.s.Close()
	b := st.Bytes(ann)
	offs, _, _ := dirlog.ScanFrames(bytes.NewReader(b), 0, func([]byte) error { return nil })
	st.SetBytes(ann, b[:offs[3]])
	e.keyErr = map[spindle.UserName]error{ann: spindle.E(spindle.NotExist, ann, "no such user")}
	e.open()
	if len(e.s.Waiting()) != 1 || len(e.s.Damaged()) != 0 {
		t.Fatalf("waiting %v, damaged %v", e.s.Waiting(), e.s.Damage())
	}
	e.mu.Lock()
	e.keyErr = nil
	e.mu.Unlock()
	if _, err := e.s.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	if len(e.s.Damaged()) != 1 {
		t.Fatalf("a resumed log shorter than its mark: damaged %v, waiting %v", e.s.Damaged(), e.s.Waiting())
	}
	_, err := e.as(ann).Lookup(ctx, "ann@example.com/docs/a.txt")
	wantKind(t, err, spindle.Damaged, "lookup")
}
