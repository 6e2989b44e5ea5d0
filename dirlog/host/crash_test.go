package host

import (
	"fmt"
	"log/slog"
	"testing"

	"spindle.dev/dirlog"

	"spindle.dev"
)

// TestCrashAtEveryStep runs a tree's life (mkdirs, puts one at a time and
// in a batch, an Access file, a delete, a rename) on a disk store over the
// strict in-memory file system, and simulates a crash after each step the
// file system sees: every write, sync, create, rename and directory sync.
// After each crash the server opens what is left and must find every
// entry it acknowledged, whole, no damage, and nothing it did not
// acknowledge but the one entry in flight, whole or not at all.
func TestCrashAtEveryStep(t *testing.T) {
	const dir = "/home/dirlogs"
	steps := 0
	for k := 0; ; k++ {
		if k > 10000 {
			t.Fatal("the scenario never ran to its end")
		}
		m := spindle.NewMemFS()
		m.MkdirAll("/home", 0o700)
		m.SyncDir("/")
		st, err := DiskStoreFS(m, dir)
		if err != nil {
			t.Fatal(err)
		}
		e := newEnv(t, st)
		c := e.as(ann)
		ctx := e.ctx
		start := m.Ops()
		m.CrashAfter(k)

		// want is what the tree must hold after the crash; maybe is the
		// change in flight when it came, which may or may not be there.
		want := map[spindle.PathName]bool{}
		var maybe []spindle.PathName
		do := func(name spindle.PathName, present bool, err error) bool {
			if err != nil {
				maybe = append(maybe, name)
				return false
			}
			want[name] = present
			return true
		}
		run := func() {
			if _, err := c.MakeDirectory(ctx, "ann@example.com/"); !do("ann@example.com/", true, err) {
				return
			}
			if _, err := c.MakeDirectory(ctx, "ann@example.com/docs"); !do("ann@example.com/docs", true, err) {
				return
			}
			for i := range 3 {
				name := spindle.PathName(fmt.Sprintf("ann@example.com/docs/f%d", i))
				if _, err := c.Put(ctx, file(name, int64(100+i))); !do(name, true, err) {
					return
				}
			}
			var batch []*spindle.DirEntry
			for i := range 4 {
				batch = append(batch, file(spindle.PathName(fmt.Sprintf("ann@example.com/docs/b%d", i)), 7))
			}
			_, errs := c.PutBatch(ctx, batch)
			failed := false
			for i, err := range errs {
				failed = !do(batch[i].Name, true, err) || failed
			}
			if failed {
				return
			}
			if _, err := c.Put(ctx, control("ann@example.com/docs/Access", "r: bob@example.com\n")); !do("ann@example.com/docs/Access", true, err) {
				return
			}
			if _, err := c.Delete(ctx, "ann@example.com/docs/f0"); !do("ann@example.com/docs/f0", false, err) {
				return
			}
			if _, err := c.Rename(ctx, "ann@example.com/docs/f1", "ann@example.com/docs/g1"); err != nil {
				maybe = append(maybe, "ann@example.com/docs/f1", "ann@example.com/docs/g1")
				return
			}
			want["ann@example.com/docs/f1"], want["ann@example.com/docs/g1"] = false, true
		}
		run()
		finished := !m.Crashed()
		if finished {
			steps = m.Ops() - start
		}
		m.Crash()

		s, err := New(ctx, mustStore(t, m, dir), Config{Keys: e.keys, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatalf("crash after step %d: the server does not open: %v", k, err)
		}
		if d := s.Damage(); len(d) > 0 {
			t.Fatalf("crash after step %d: damage reported: %v", k, d)
		}
		inFlight := map[spindle.PathName]bool{}
		for _, n := range maybe {
			inFlight[n] = true
		}
		for name, present := range want {
			if inFlight[name] {
				continue
			}
			d, err := s.Lookup(ctx, ann, name)
			switch {
			case present && err != nil:
				t.Fatalf("crash after step %d: acknowledged %s lost: %v", k, name, err)
			case present && name != "ann@example.com/" && d.Name != name:
				t.Fatalf("crash after step %d: %s holds %s", k, name, d.Name)
			case !present && err == nil:
				t.Fatalf("crash after step %d: acknowledged removal of %s undone", k, name)
			}
		}
		// Nothing else is there: every item is wanted or in flight.
		if all, err := s.Glob(ctx, ann, "ann@example.com/docs/*"); err == nil {
			for _, d := range all {
				if !want[d.Name] && !inFlight[d.Name] {
					t.Fatalf("crash after step %d: %s is there, never acknowledged nor in flight", k, d.Name)
				}
			}
		}
		s.Close()
		if finished {
			break
		}
	}
	t.Logf("a crash after each of %d file-system steps left every acknowledged entry", steps)
}

func mustStore(t *testing.T, fsys spindle.FS, dir string) Store {
	t.Helper()
	st, err := DiskStoreFS(fsys, dir)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestCompactCrashAtEveryStep compacts a log on a disk store over the
// strict in-memory file system, appends after the checkpoint and compacts
// again, and simulates a crash after each step the file system sees.
// After each crash the server must open without damage and hold either
// the old log or the new one: the tree and head as acknowledged, with the
// entry in flight, if any, whole or not at all.
func TestCompactCrashAtEveryStep(t *testing.T) {
	const dir = "/home/dirlogs"
	steps := 0
	for k := 0; ; k++ {
		if k > 10000 {
			t.Fatal("the scenario never ran to its end")
		}
		m := spindle.NewMemFS()
		m.MkdirAll("/home", 0o700)
		m.SyncDir("/")
		e := newEnv(t, mustStore(t, m, dir))
		c := e.as(ann)
		ctx := e.ctx
		e.setup()
		e.do(c.Put(ctx, file("ann@example.com/docs/a.txt", 20)))
		e.do(c.Rename(ctx, "ann@example.com/docs/sub", "ann@example.com/docs/moved"))
		start := m.Ops()
		m.CrashAfter(k)

		// heads are the states the log may be found in: the one
		// acknowledged last, and the next if an append was in flight.
		var heads []*dirlog.Head
		ack := func() {
			h, err := e.s.Head(ctx, ann)
			if err != nil {
				t.Fatal(err)
			}
			heads = []*dirlog.Head{h}
		}
		ack()
		run := func() {
			if _, err := e.s.Compact(ctx, ann); err != nil {
				return
			}
			if _, err := c.Put(ctx, file("ann@example.com/docs/new.txt", 7)); err != nil {
				heads = append(heads, nil) // Either state.
				return
			}
			ack()
			if _, err := c.Delete(ctx, "ann@example.com/docs/a.txt"); err != nil {
				heads = append(heads, nil)
				return
			}
			ack()
			if _, err := e.s.Compact(ctx, ann); err != nil {
				return
			}
			if _, err := c.Put(ctx, file("ann@example.com/docs/last.txt", 7)); err != nil {
				heads = append(heads, nil)
				return
			}
			ack()
		}
		run()
		finished := !m.Crashed()
		if finished {
			steps = m.Ops() - start
		}
		m.Crash()

		s, err := New(ctx, mustStore(t, m, dir), Config{Keys: e.keys, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatalf("crash after step %d: the server does not open: %v", k, err)
		}
		if d := s.Damage(); len(d) > 0 {
			t.Fatalf("crash after step %d: damage reported: %v", k, d)
		}
		h, err := s.Head(ctx, ann)
		if err != nil {
			t.Fatal(err)
		}
		want := heads[0]
		ok := h.Seq == want.Seq && h.Hash == want.Hash && h.Root == want.Root
		if !ok && len(heads) > 1 {
			ok = h.Seq == want.Seq+1 // The entry in flight, whole.
		}
		if !ok {
			t.Fatalf("crash after step %d: log at %d %s, acknowledged %d %s", k, h.Seq, h.Hash, want.Seq, want.Hash)
		}
		if _, err := s.Lookup(ctx, ann, "ann@example.com/docs/moved/b.txt"); err != nil {
			t.Fatalf("crash after step %d: %v", k, err)
		}
		s.Close()
		if finished {
			break
		}
	}
	t.Logf("a crash after each of %d file-system steps left the old log or the new one", steps)
}
