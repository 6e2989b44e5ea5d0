package host

import (
	"errors"
	"log/slog"
	"testing"

	"spindle.dev/dirlog"

	"spindle.dev"
)

// mirrorEnv returns a server on store that knows the same users' keys as
// src, with a host key of its own: a mirror of src's logs.
func mirrorEnv(t *testing.T, src *env, store Store) *env {
	t.Helper()
	e := &env{t: t, ctx: src.ctx, store: store, host: newSigner(t, "mirror@example.com"), signers: src.signers}
	e.open()
	return e
}

// compactedSource returns an env whose ann log was compacted, with one
// entry after the checkpoint, the entries of ann's log before compaction
// and the checkpoint.
func compactedSource(t *testing.T) (*env, []*dirlog.Entry, *dirlog.Checkpoint) {
	t.Helper()
	src := newEnv(t, &MemStore{})
	src.grow()
	whole, err := src.s.Entries(src.ctx, ann, ann, 1, 1000)
	if err != nil {
		t.Fatal(err)
	}
	cp, err := src.s.Compact(src.ctx, ann)
	if err != nil {
		t.Fatal(err)
	}
	src.do(src.as(ann).Put(src.ctx, file("ann@example.com/docs/after.txt", 4)))
	return src, whole, cp
}

func sameHead(t *testing.T, what string, got, want *dirlog.Head) {
	t.Helper()
	if got.Seq != want.Seq || got.Hash != want.Hash || got.Root != want.Root {
		t.Fatalf("%s: head at %d %s root %s, want %d %s root %s", what, got.Seq, got.Hash, got.Root, want.Seq, want.Hash, want.Root)
	}
}

// TestStartFrom installs a checkpoint on an empty mirror, which then takes
// the entries after it and serves the tree, from memory and after a
// restart; a mirror behind that agrees with the checkpoint starts from it
// too. A tampered checkpoint, one behind the log, or one the log forks
// from is refused and nothing changes.
func TestStartFrom(t *testing.T) {
	src, whole, cp := compactedSource(t)
	ctx := src.ctx
	tail, err := src.s.Entries(ctx, ann, ann, cp.Seq+1, 100)
	if err != nil {
		t.Fatal(err)
	}
	want, err := src.s.Head(ctx, ann)
	if err != nil {
		t.Fatal(err)
	}

	dst := mirrorEnv(t, src, &MemStore{})
	// Tampered checkpoints: nothing installed.
	for _, tc := range []struct {
		name string
		fn   func(cp *dirlog.Checkpoint)
	}{
		{"entry signature", func(cp *dirlog.Checkpoint) { e := cp.Entries[len(cp.Entries)-1]; e.Sig[len(e.Sig)/2] ^= 1 }},
		{"map root", func(cp *dirlog.Checkpoint) { cp.Root[0] ^= 1 }},
		{"an item dropped", func(cp *dirlog.Checkpoint) { cp.Items = cp.Items[:len(cp.Items)-1] }},
	} {
		bad, err := dirlog.UnmarshalCheckpoint(cp.Marshal())
		if err != nil {
			t.Fatal(err)
		}
		tc.fn(bad)
		err = dst.s.StartFrom(ctx, bad)
		wantKind(t, err, spindle.Integrity, "a checkpoint with a bad "+tc.name)
		if h, _ := dst.s.Head(ctx, ann); h.Seq != 0 {
			t.Fatalf("after a checkpoint with a bad %s: mirror at %d", tc.name, h.Seq)
		}
		if got, _ := dst.s.Checkpoint(ctx, ann, ann); got != nil {
			t.Fatalf("after a checkpoint with a bad %s: the mirror holds a checkpoint", tc.name)
		}
	}
	if users := dst.s.Users(); len(users) != 0 {
		t.Fatalf("after refused checkpoints the mirror holds logs of %v", users)
	}

	if err := dst.s.StartFrom(ctx, cp); err != nil {
		t.Fatal(err)
	}
	h, err := dst.s.Head(ctx, ann)
	if err != nil {
		t.Fatal(err)
	}
	sameHead(t, "after StartFrom", h, cp.Head())
	if err := dst.s.StartFrom(ctx, cp); err != nil {
		t.Fatalf("the same checkpoint again: %v", err)
	}
	if _, err := dst.s.Entries(ctx, ann, ann, 1, 10); !errors.Is(err, spindle.NotExist) {
		t.Fatalf("entries before the checkpoint on the mirror: %v, want NotExist", err)
	}
	if _, err := dst.s.AppendBatch(ctx, tail); err != nil {
		t.Fatalf("entries after the checkpoint: %v", err)
	}
	h, _ = dst.s.Head(ctx, ann)
	sameHead(t, "after the tail", h, want)
	for _, name := range []spindle.PathName{"ann@example.com/docs/moved/c.txt", "ann@example.com/docs/after.txt", "ann@example.com/Group/friends"} {
		if _, err := dst.s.Lookup(ctx, ann, name); err != nil {
			t.Fatalf("lookup of %s on the mirror: %v", name, err)
		}
	}
	if err := dst.s.StartFrom(ctx, cp); !errors.Is(err, spindle.Exist) {
		t.Fatalf("a checkpoint behind the log: %v, want Exist", err)
	}
	dst.reopen()
	if d := dst.s.Damage(); len(d) > 0 {
		t.Fatalf("mirror reopened: damage %v", d)
	}
	h, _ = dst.s.Head(ctx, ann)
	sameHead(t, "mirror reopened", h, want)

	// A mirror behind, agreeing with the checkpoint, starts from it.
	behind := mirrorEnv(t, src, &MemStore{})
	if _, err := behind.s.AppendBatch(ctx, whole[:5]); err != nil {
		t.Fatal(err)
	}
	if err := behind.s.StartFrom(ctx, cp); err != nil {
		t.Fatalf("mirror at 5 starting from the checkpoint at %d: %v", cp.Seq, err)
	}
	h, _ = behind.s.Head(ctx, ann)
	sameHead(t, "mirror behind after StartFrom", h, cp.Head())

	// A mirror whose log forks from the checkpoint's at an entry it
	// holds refuses it.
	fork := mirrorEnv(t, src, &MemStore{})
	if _, err := fork.s.AppendBatch(ctx, whole[:4]); err != nil {
		t.Fatal(err)
	}
	fork.do(fork.as(ann).Put(ctx, file("ann@example.com/docs/sub/b.txt", 999))) // Entry 5 in src is this put, of another size.
	before, _ := fork.s.Head(ctx, ann)
	err = fork.s.StartFrom(ctx, cp)
	wantKind(t, err, spindle.Integrity, "a checkpoint the log forks from")
	h, _ = fork.s.Head(ctx, ann)
	sameHead(t, "forked mirror after a refused checkpoint", h, before)
}

// TestStartFromCrashAtEveryStep installs a checkpoint on a mirror that
// holds the first entries of the log, then appends the entry after it, on
// a disk store over the strict in-memory file system, crashing after each
// step the file system sees. After each crash the mirror must open without
// damage and hold its old log, the checkpoint, or the checkpoint and the
// entry after it.
func TestStartFromCrashAtEveryStep(t *testing.T) {
	src, whole, cp := compactedSource(t)
	ctx := src.ctx
	tail, err := src.s.Entries(ctx, ann, ann, cp.Seq+1, 100)
	if err != nil {
		t.Fatal(err)
	}
	last, err := src.s.Head(ctx, ann)
	if err != nil {
		t.Fatal(err)
	}
	const dir = "/home/dirlogs"
	steps := 0
	for k := 0; ; k++ {
		if k > 10000 {
			t.Fatal("the scenario never ran to its end")
		}
		m := spindle.NewMemFS()
		m.MkdirAll("/home", 0o700)
		m.SyncDir("/")
		dst := mirrorEnv(t, src, mustStore(t, m, dir))
		if _, err := dst.s.AppendBatch(ctx, whole[:3]); err != nil {
			t.Fatal(err)
		}
		old, _ := dst.s.Head(ctx, ann)
		start := m.Ops()
		m.CrashAfter(k)
		if err := dst.s.StartFrom(ctx, cp); err == nil {
			dst.s.AppendBatch(ctx, tail)
		}
		finished := !m.Crashed()
		if finished {
			steps = m.Ops() - start
		}
		m.Crash()

		s, err := New(ctx, mustStore(t, m, dir), Config{Keys: dst.keys, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatalf("crash after step %d: the mirror does not open: %v", k, err)
		}
		if d := s.Damage(); len(d) > 0 {
			t.Fatalf("crash after step %d: damage reported: %v", k, d)
		}
		h, err := s.Head(ctx, ann)
		if err != nil {
			t.Fatal(err)
		}
		ok := false
		for _, w := range []*dirlog.Head{old, cp.Head(), last} {
			ok = ok || h.Seq == w.Seq && h.Hash == w.Hash && h.Root == w.Root
		}
		if !ok {
			t.Fatalf("crash after step %d: mirror at %d %s, want %d, %d or %d", k, h.Seq, h.Hash, old.Seq, cp.Seq, last.Seq)
		}
		if finished {
			sameHead(t, "no crash", h, last)
		}
		if h.Seq >= cp.Seq {
			if _, err := s.Lookup(ctx, ann, "ann@example.com/docs/moved/c.txt"); err != nil {
				t.Fatalf("crash after step %d: %v", k, err)
			}
		}
		s.Close()
		if finished {
			break
		}
	}
	t.Logf("a crash after each of %d file-system steps left the old log, the checkpoint, or both and the entry after", steps)
}
