package host

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"

	"spindle.dev"
	"spindle.dev/dirlog"
)

// readersWorld is ann's tree in which cat may write docs, and bob and
// the members of ann's group friends (dan) may read it.
func readersWorld(t *testing.T) *env {
	t.Helper()
	e := newEnv(t, &MemStore{})
	a := e.as(ann)
	e.do(a.MakeDirectory(e.ctx, "ann@example.com/"))
	e.do(a.MakeDirectory(e.ctx, "ann@example.com/Group"))
	e.do(a.MakeDirectory(e.ctx, "ann@example.com/docs"))
	e.do(a.MakeDirectory(e.ctx, "ann@example.com/docs/sub"))
	e.do(a.MakeDirectory(e.ctx, "ann@example.com/other"))
	e.do(a.Put(e.ctx, control("ann@example.com/Group/friends", "dan@other.org\n")))
	e.do(a.Put(e.ctx, control("ann@example.com/Group/more", "friends\n")))
	e.do(a.Put(e.ctx, control("ann@example.com/docs/Access", "*: ann@example.com\nread, write, create: cat@example.com\nread: more, bob@example.com\n")))
	return e
}

// Attack 3 at the sequencer: cat's client was handed an older, genuine
// answer (by a relay replaying it, or a Group file ann has since
// changed), worked out the readers under it, and wrapped the file key for
// dan, whom ann has removed. Whatever fooled the client, the entry names
// the head its readers were worked out at, and the sequencer refuses it
// with Stale if the Access file governing the name, an Access file
// between it and the name, or a Group file its read right names
// (through other groups too), changed after that; a change elsewhere
// does not. Worked out again at the head, the put is taken.
func TestReadersFixedAtAccessState(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(e *env)
		stale  bool
	}{
		{"Access file replaced", func(e *env) {
			e.do(e.as(ann).Put(e.ctx, control("ann@example.com/docs/Access", "*: ann@example.com\nread, write, create: cat@example.com\nread: bob@example.com\n")))
		}, true},
		{"Access file deleted", func(e *env) {
			e.do(e.as(ann).Put(e.ctx, control("ann@example.com/Access", "*: ann@example.com\nread, write, create: cat@example.com\n")))
			e.do(e.as(ann).Delete(e.ctx, "ann@example.com/docs/Access"))
		}, true},
		{"nearer Access file", func(e *env) {
			e.do(e.as(ann).Put(e.ctx, control("ann@example.com/docs/sub/Access", "*: ann@example.com\nread, write, create: cat@example.com\n")))
		}, true},
		{"group member removed", func(e *env) {
			e.do(e.as(ann).Put(e.ctx, control("ann@example.com/Group/friends", "bob@example.com\n")))
		}, true},
		{"group deleted", func(e *env) {
			e.do(e.as(ann).Delete(e.ctx, "ann@example.com/Group/friends"))
		}, true},
		{"another directory's Access file", func(e *env) {
			e.do(e.as(ann).Put(e.ctx, control("ann@example.com/other/Access", "*: ann@example.com\n")))
		}, false},
		{"a file put", func(e *env) {
			e.do(e.as(cat).Put(e.ctx, file("ann@example.com/docs/sub/x", 3)))
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := readersWorld(t)
			at := e.do2(e.s.Head(e.ctx, ann)).Seq
			tc.change(e)
			c := e.as(cat)
			_, err := c.PutAt(e.ctx, file("ann@example.com/docs/sub/new", 5), at)
			if !tc.stale {
				if err != nil {
					t.Fatalf("put whose readers' files did not change: %v", err)
				}
				return
			}
			wantKind(t, err, spindle.Stale, "put with readers worked out before the change")
			now := e.do2(e.s.Head(e.ctx, ann)).Seq
			e.do(c.PutAt(e.ctx, file("ann@example.com/docs/sub/new", 5), now))
		})
	}
}

// A dir host that lies, taking cat's entry whose readers were worked out
// before ann removed dan, is caught by every replay of the log: an audit,
// the host's own restart, and a mirror copying the log.
func TestStaleReadersRefusedInReplay(t *testing.T) {
	e := readersWorld(t)
	store := e.store.(*MemStore)
	a := e.as(ann)
	at := e.do2(e.s.Head(e.ctx, ann)).Seq
	e.do(a.Put(e.ctx, control("ann@example.com/Group/friends", "bob@example.com\n")))
	h := e.do2(e.s.Head(e.ctx, ann))
	good, err := e.s.Entries(e.ctx, ann, ann, 1, 100)
	if err != nil {
		t.Fatal(err)
	}

	bad := &dirlog.Entry{Seq: h.Seq + 1, Prev: h.Hash, Time: spindle.Now(), Op: dirlog.OpPut, Entry: *file("ann@example.com/docs/for-dan", 4), ReadersAt: at}
	bad.Entry.Sequence = bad.Seq
	if err := bad.Sign(e.signers[cat]); err != nil {
		t.Fatal(err)
	}
	_, err = e.s.Append(e.ctx, bad)
	wantKind(t, err, spindle.Stale, "the honest sequencer")

	// The lying host stores it.
	e.s.Close()
	rec := dirlog.Record{Entry: bad.Marshal(), Key: e.signers[cat].PublicKey()}
	store.SetBytes(ann, dirlog.AppendFrame(store.Bytes(ann), rec.Marshal()))
	reps, err := dirlog.Audit(e.ctx, map[spindle.UserName][]byte{ann: store.Bytes(ann)}, e.keys, nil)
	if err != nil || len(reps) != 1 || !errors.Is(reps[0].Err, spindle.Integrity) || reps[0].Entries != h.Seq {
		t.Fatalf("audit of the lying host's log: %+v, %v; want it cut at %d", reps, err, h.Seq)
	}
	e.open()
	if d := e.s.Damage(); len(d) != 1 {
		t.Fatalf("the host's own replay took the entry: damage %v", d)
	}

	m, err := New(e.ctx, &MemStore{}, Config{Keys: e.keys, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, err := m.Mirror(e.ctx, good); err != nil {
		t.Fatalf("mirror of the honest entries: %v", err)
	}
	_, err = m.Mirror(e.ctx, []*dirlog.Entry{bad})
	wantKind(t, err, spindle.Stale, "a mirror")
}

// rotation is ann's key history after she replaced old with her current
// key by the key log's record at index rotatedAt.
const rotatedAt = 10

func (e *env) rotateAnn(old *testSigner) {
	e.t.Helper()
	e.mu.Lock()
	e.signers[ann] = newSigner(e.t, ann)
	e.mu.Unlock()
	e.history = func(ctx context.Context, u spindle.UserName) ([]dirlog.HeldKey, error) {
		k, err := e.keys(ctx, u)
		if u == ann {
			return []dirlog.HeldKey{{Key: old.PublicKey(), Until: 0, Replaced: rotatedAt}, {Key: k, Until: -1}}, err
		}
		return []dirlog.HeldKey{{Key: k, Until: -1}}, err
	}
}

// signed returns an entry putting a file at name for the place after h,
// anchored at keyAt and signed by s.
func signed(t *testing.T, s *testSigner, h *dirlog.Head, name spindle.PathName, keyAt int64) *dirlog.Entry {
	t.Helper()
	en := &dirlog.Entry{Seq: h.Seq + 1, Prev: h.Hash, Time: spindle.Now(), Op: dirlog.OpPut, Entry: *file(name, 4), ReadersAt: h.Seq, KeyAt: keyAt}
	en.Entry.Sequence = en.Seq
	if err := en.Sign(s); err != nil {
		t.Fatal(err)
	}
	return en
}

// audit audits user's stored log with e's keys and history.
func (e *env) audit(user spindle.UserName) dirlog.AuditReport {
	e.t.Helper()
	reps, err := dirlog.Audit(e.ctx, map[spindle.UserName][]byte{user: e.store.(*MemStore).Bytes(user)}, e.keys, e.history)
	if err != nil || len(reps) != 1 {
		e.t.Fatalf("Audit = %+v, %v", reps, err)
	}
	return reps[0]
}

// Attack 5 of issue 26, as a thief mounts it: holding the key ann
// replaced, the thief signs an entry of bob's tree, where ann may write,
// anchored after the rotation. The honest host refuses it; a lying host
// that stores it has a log that its own restart and an audit cut there.
// Entries ann signed with that key before the rotation still verify.
func TestRotatedKeySignsNothingInOtherTrees(t *testing.T) {
	e := newEnv(t, &MemStore{})
	ctx := e.ctx
	b := e.as(bob)
	e.do(b.MakeDirectory(ctx, "bob@example.com/"))
	e.do(b.Put(ctx, control("bob@example.com/Access", "*: bob@example.com\nread, write, create: ann@example.com\n")))
	old := e.signers[ann]
	before := e.s.For(old)
	before.FollowKeyLog(func() int64 { return rotatedAt }, nil)
	e.do(before.Put(ctx, file("bob@example.com/before", 4)))
	e.rotateAnn(old)
	e.reopen()
	if d := e.s.Damage(); len(d) != 0 {
		t.Fatalf("ann's entry from before the rotation: %v", d)
	}

	h := e.do2(e.s.Head(ctx, bob))
	thief := signed(t, old, h, "bob@example.com/stolen", rotatedAt+1)
	_, err := e.s.Append(ctx, thief)
	wantKind(t, err, spindle.Integrity, "the honest host")

	e.s.Close()
	store := e.store.(*MemStore)
	good := store.Bytes(bob)
	rec := dirlog.Record{Entry: thief.Marshal(), Key: old.PublicKey()}
	store.SetBytes(bob, dirlog.AppendFrame(good, rec.Marshal()))
	if rep := e.audit(bob); !errors.Is(rep.Err, spindle.Integrity) || rep.Entries != h.Seq {
		t.Fatalf("audit of the lying host's log: %+v; want it cut at %d", rep, h.Seq)
	}
	e.open()
	if d := e.s.Damage(); len(d) != 1 || !strings.Contains(d[0].Error(), "replaced") {
		t.Fatalf("the host's own replay: damage %v", d)
	}
}

// A thief who backdates the anchor to before the rotation is refused by
// the honest host (the entry is anchored far behind the key log it
// knows, and its key is not current), and by every replay once an entry
// anchored after the rotation precedes it in the tree: anchors never
// decrease. In a tree nobody has written to since the rotation, a lying
// host that takes the backdated entry is not caught: the residual that
// HeldKeys documents.
func TestBackdatedAnchor(t *testing.T) {
	e := newEnv(t, &MemStore{})
	ctx := e.ctx
	e.s.Close()
	var keyLog atomic.Int64
	keyLog.Store(rotatedAt)
	s, err := New(ctx, e.store, Config{Keys: e.keys, KeyLogSize: keyLog.Load, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	e.s = s
	b := e.as(bob)
	b.FollowKeyLog(keyLog.Load, nil)
	e.do(b.MakeDirectory(ctx, "bob@example.com/"))
	e.do(b.Put(ctx, control("bob@example.com/Access", "*: bob@example.com\nread, write, create: ann@example.com\n")))
	old := e.signers[ann]
	e.rotateAnn(old)
	keyLog.Store(rotatedAt + 1 + dirlog.KeyAtSlack)

	h := e.do2(e.s.Head(ctx, bob))
	backdated := signed(t, old, h, "bob@example.com/backdated", rotatedAt)
	_, err = e.s.Append(ctx, backdated)
	wantKind(t, err, spindle.Stale, "the honest host, an entry anchored far behind")
	current := signed(t, e.signers[ann], h, "bob@example.com/current", 0)
	_, err = e.s.Append(ctx, current)
	wantKind(t, err, spindle.Stale, "the honest host, ann's current key anchored far behind")
	ahead := signed(t, e.signers[ann], h, "bob@example.com/ahead", keyLog.Load()+dirlog.KeyAtSlack+1)
	_, err = e.s.Append(ctx, ahead)
	wantKind(t, err, spindle.Invalid, "an entry anchored far ahead, which would leave no other writer an anchor")

	// The lying host, in a tree untouched since the rotation: not caught.
	e.s.Close()
	store := e.store.(*MemStore)
	good := store.Bytes(bob)
	rec := dirlog.Record{Entry: backdated.Marshal(), Key: old.PublicKey()}
	store.SetBytes(bob, dirlog.AppendFrame(good, rec.Marshal()))
	if rep := e.audit(bob); rep.Err != nil {
		t.Fatalf("the residual moved: a backdated entry in an untouched tree is refused by audit: %v", rep.Err)
	}

	// Once bob writes anchored after the rotation, it is caught.
	store.SetBytes(bob, good)
	e.open()
	b = e.as(bob)
	b.FollowKeyLog(keyLog.Load, nil)
	e.do(b.Put(ctx, file("bob@example.com/after", 4)))
	h = e.do2(e.s.Head(ctx, bob))
	e.s.Close()
	backdated = signed(t, old, h, "bob@example.com/backdated", rotatedAt)
	rec = dirlog.Record{Entry: backdated.Marshal(), Key: old.PublicKey()}
	store.SetBytes(bob, dirlog.AppendFrame(store.Bytes(bob), rec.Marshal()))
	if rep := e.audit(bob); !errors.Is(rep.Err, spindle.Integrity) || rep.Entries != h.Seq {
		t.Fatalf("audit of a backdated entry after one anchored later: %+v; want it cut at %d", rep, h.Seq)
	}
}

// A sequencer takes no entry of the first format, which names neither a
// readers' head nor an anchor; a mirror still copies one a log holds.
func TestLegacyEntriesMirroredNotAppended(t *testing.T) {
	e := newEnv(t, &MemStore{})
	h := &dirlog.Head{}
	en := &dirlog.Entry{Seq: 1, Time: spindle.Now(), Op: dirlog.OpMkdir, Entry: spindle.DirEntry{Name: "ann@example.com/", Attr: spindle.AttrDirectory, Sequence: 1}, Legacy: true}
	if err := en.Sign(e.signers[ann]); err != nil {
		t.Fatal(err)
	}
	_, err := e.s.Append(e.ctx, en)
	wantKind(t, err, spindle.Invalid, "a new entry of the first format")
	if _, err := e.s.Mirror(e.ctx, []*dirlog.Entry{en}); err != nil {
		t.Fatalf("a mirror copying an entry of the first format: %v", err)
	}
	// After it, an anchored entry; and after that, no legacy one.
	h = e.do2(e.s.Head(e.ctx, ann))
	next := &dirlog.Entry{Seq: 2, Prev: h.Hash, Time: spindle.Now(), Op: dirlog.OpMkdir, Entry: spindle.DirEntry{Name: "ann@example.com/d", Attr: spindle.AttrDirectory, Sequence: 2}, KeyAt: 3, ReadersAt: 1}
	if err := next.Sign(e.signers[ann]); err != nil {
		t.Fatal(err)
	}
	e.do(e.s.Append(e.ctx, next))
	h = e.do2(e.s.Head(e.ctx, ann))
	late := &dirlog.Entry{Seq: 3, Prev: h.Hash, Time: spindle.Now(), Op: dirlog.OpMkdir, Entry: spindle.DirEntry{Name: "ann@example.com/e", Attr: spindle.AttrDirectory, Sequence: 3}, Legacy: true}
	if err := late.Sign(e.signers[ann]); err != nil {
		t.Fatal(err)
	}
	_, err = e.s.Mirror(e.ctx, []*dirlog.Entry{late})
	wantKind(t, err, spindle.Stale, "an entry of the first format after an anchored one")
}

// A tree folded from a checkpoint does not know which Access files the
// dropped entries deleted: its sequencer refuses a put whose readers were
// worked out before the checkpoint, and takes it worked out again.
func TestReadersBeforeCheckpoint(t *testing.T) {
	e := readersWorld(t)
	at := e.do2(e.s.Head(e.ctx, ann)).Seq
	e.do(e.as(ann).Put(e.ctx, file("ann@example.com/other/x", 1)))
	if _, err := e.s.Compact(e.ctx, ann); err != nil {
		t.Fatal(err)
	}
	e.reopen()
	c := e.as(cat)
	_, err := c.PutAt(e.ctx, file("ann@example.com/docs/new", 5), at)
	wantKind(t, err, spindle.Stale, "readers worked out before the checkpoint")
	e.do(c.PutAt(e.ctx, file("ann@example.com/docs/new", 5), e.do2(e.s.Head(e.ctx, ann)).Seq))
}

// A writer whose key log is behind the tree's anchor is refused as Stale,
// catches up (FollowKeyLog's refresh) and signs again, one entry or a
// batch; one whose key log cannot catch up gets the Stale error.
func TestWriterCatchesUpWithTheAnchor(t *testing.T) {
	e := newEnv(t, &MemStore{})
	a := e.as(ann)
	a.FollowKeyLog(func() int64 { return 50 }, nil)
	e.do(a.MakeDirectory(e.ctx, "ann@example.com/"))
	e.do(a.Put(e.ctx, control("ann@example.com/Access", "*: ann@example.com\nread, write, create: bob@example.com\n")))

	var bobsLog atomic.Int64
	bobsLog.Store(10)
	refreshes := 0
	b := e.as(bob)
	b.FollowKeyLog(bobsLog.Load, func(context.Context) error {
		refreshes++
		bobsLog.Store(50)
		return nil
	})
	e.do(b.MakeDirectory(e.ctx, "ann@example.com/one"))
	bobsLog.Store(10)
	_, errs := b.PutBatch(e.ctx, []*spindle.DirEntry{file("ann@example.com/two", 1), file("ann@example.com/three", 1)})
	for _, err := range errs {
		if err != nil {
			t.Fatalf("batch after catching up: %v", err)
		}
	}
	if refreshes != 2 {
		t.Fatalf("%d refreshes, want 2", refreshes)
	}
	stuck := e.as(bob)
	stuck.FollowKeyLog(func() int64 { return 10 }, func(context.Context) error { return nil })
	_, err := stuck.MakeDirectory(e.ctx, "ann@example.com/four")
	wantKind(t, err, spindle.Stale, "a writer whose key log stays behind")
}
