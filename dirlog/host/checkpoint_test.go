package host

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"

	"spindle.dev/dirlog"

	"spindle.dev"
)

// grow gives ann a tree that exercises every kind of item a checkpoint
// holds: directories, files, an overwrite, a delete, a rename of a
// directory with files in it, an Access file and a Group file with two
// versions; and gives cat a tree whose Access file names ann's group, into
// which bob writes while the group names him.
func (e *env) grow() {
	e.t.Helper()
	ctx := e.ctx
	e.setup()
	c := e.as(ann)
	e.do(c.Put(ctx, file("ann@example.com/docs/a.txt", 20))) // Overwrite.
	e.do(c.Put(ctx, file("ann@example.com/docs/gone.txt", 5)))
	e.do(c.Delete(ctx, "ann@example.com/docs/gone.txt"))
	e.do(c.Put(ctx, control("ann@example.com/docs/Access", "r: bob@example.com\n*: ann@example.com\n")))
	e.do(c.MakeDirectory(ctx, "ann@example.com/Group"))
	e.do(c.Put(ctx, control("ann@example.com/Group/friends", "bob@example.com\n")))
	e.do(c.Rename(ctx, "ann@example.com/docs/sub", "ann@example.com/docs/moved"))
	e.do(c.Put(ctx, file("ann@example.com/docs/moved/c.txt", 1)))

	k := e.as(cat)
	e.do(k.MakeDirectory(ctx, "cat@example.com/"))
	e.do(k.Put(ctx, control("cat@example.com/Access", "*: ann@example.com/Group/friends\n")))
	e.do(e.as(bob).Put(ctx, file("cat@example.com/by-bob", 3)))
	// Bob's entry in cat's log used ann's group as it was; the group
	// changes after.
	e.do(c.Put(ctx, control("ann@example.com/Group/friends", "dan@other.org\n")))
}

// TestCheckpoint checks that a checkpoint of a tree verifies (host
// signature, every entry's signature, map root), encodes canonically, and
// matches the head at its sequence.
func TestCheckpoint(t *testing.T) {
	e := newEnv(t, &MemStore{})
	e.grow()
	head, err := e.s.Head(e.ctx, ann)
	if err != nil {
		t.Fatal(err)
	}
	cp, err := e.s.Compact(e.ctx, ann)
	if err != nil {
		t.Fatal(err)
	}
	if cp.Seq != head.Seq || cp.Hash != head.Hash || cp.Root != head.Root {
		t.Fatalf("checkpoint at %d %s root %s; head at %d %s root %s", cp.Seq, cp.Hash, cp.Root, head.Seq, head.Hash, head.Root)
	}
	if err := cp.CheckHead(head); err != nil {
		t.Fatal(err)
	}
	if err := cp.Verify(e.ctx, e.keys, nil, e.host); err != nil {
		t.Fatalf("Verify: %v", err)
	}
	b := cp.Marshal()
	got, err := dirlog.UnmarshalCheckpoint(b)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Marshal(), b) {
		t.Fatal("checkpoint does not encode the same after decoding")
	}
	if err := got.Verify(e.ctx, e.keys, nil, e.host); err != nil {
		t.Fatalf("Verify after decoding: %v", err)
	}
	// The deleted file's entry and the overwritten put are gone; the
	// live items are all there.
	if n := len(cp.Items); n != 9 {
		t.Errorf("%d items in the checkpoint, want 9", n)
	}
	for _, e := range cp.Entries {
		if e.Entry.Name == "ann@example.com/docs/gone.txt" {
			t.Errorf("the checkpoint keeps entry %d of a deleted file", e.Seq)
		}
	}
	// Compacting again with nothing new returns the same checkpoint.
	again, err := e.s.Compact(e.ctx, ann)
	if err != nil || again != cp {
		t.Fatalf("second Compact: %v, %p want %p", err, again, cp)
	}
}

// TestCheckpointBad checks that every kind of tampering with a checkpoint
// is caught as Integrity.
func TestCheckpointBad(t *testing.T) {
	e := newEnv(t, &MemStore{})
	e.grow()
	cp, err := e.s.Compact(e.ctx, ann)
	if err != nil {
		t.Fatal(err)
	}
	fresh := func() *dirlog.Checkpoint {
		c, err := dirlog.UnmarshalCheckpoint(cp.Marshal())
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	other := newSigner(t, "mallory@example.com")
	cases := []struct {
		what   string
		change func(c *dirlog.Checkpoint)
		v      dirlog.HeadVerifier
	}{
		{"a bad entry signature", func(c *dirlog.Checkpoint) { c.Entries[1].Sig[5] ^= 1 }, nil},
		{"an entry changed after signing", func(c *dirlog.Checkpoint) { c.Entries[1].Entry.Size++ }, nil},
		{"an item dropped", func(c *dirlog.Checkpoint) { c.Items = c.Items[:len(c.Items)-1] }, nil},
		{"another map root", func(c *dirlog.Checkpoint) { c.Root[0] ^= 1 }, nil},
		{"a move dropped", func(c *dirlog.Checkpoint) {
			for i := range c.Items {
				if len(c.Items[i].Moves) > 0 {
					c.Items[i].Moves = nil
					return
				}
			}
			t.Fatal("no moved item")
		}, nil},
		{"the sequence changed after signing", func(c *dirlog.Checkpoint) { c.Seq++ }, e.host},
		{"signed by a host the reader does not accept", func(c *dirlog.Checkpoint) { c.Sign(other) }, e.host},
		{"unsigned", func(c *dirlog.Checkpoint) { c.Sig = nil }, e.host},
		{"a group's history dropped", func(c *dirlog.Checkpoint) { c.Groups = nil }, nil},
	}
	// With a key history, a bad signature is a bad checkpoint; without
	// one it is undecided (it may be a key the writer replaced).
	history := e.currentKeys
	for _, tc := range cases {
		c := fresh()
		tc.change(c)
		wantKind(t, c.Verify(e.ctx, e.keys, history, tc.v), spindle.Integrity, tc.what)
	}
	c := fresh()
	c.Entries[1].Sig[5] ^= 1
	if err := c.Verify(e.ctx, e.keys, nil, nil); err == nil {
		t.Fatal("a bad signature verified without a key history")
	}
	// A head at the checkpoint's sequence with another hash is caught.
	h, _ := e.s.Head(e.ctx, ann)
	h.Hash[0] ^= 1
	wantKind(t, cp.CheckHead(h), spindle.Integrity, "a head that disagrees")
}

// TestCompactedLog checks that a compacted log, with entries appended
// after its checkpoint, comes back the same when the host restarts, that
// other logs whose decisions used its old Group files still replay, and
// that a mirror or an auditor can load it: Export and Audit, Checkpoint,
// Entries after it and CheckLogFrom.
func TestCompactedLog(t *testing.T) {
	e := newEnv(t, &MemStore{})
	e.grow()
	cp, err := e.s.Compact(e.ctx, ann)
	if err != nil {
		t.Fatal(err)
	}
	c := e.as(ann)
	e.do(c.Put(e.ctx, file("ann@example.com/docs/after.txt", 4)))
	e.do(c.Rename(e.ctx, "ann@example.com/docs/moved", "ann@example.com/docs/again"))
	e.do(c.Delete(e.ctx, "ann@example.com/docs/a.txt"))
	before, catBefore := e.dump(ann), e.dump(cat)
	head, err := e.s.Head(e.ctx, ann)
	if err != nil {
		t.Fatal(err)
	}
	e.reopen()
	if d := e.s.Damage(); len(d) > 0 {
		t.Fatalf("damage after reopening: %v", d)
	}
	if after := e.dump(ann); after != before {
		t.Fatalf("tree after reopening:\n%s\nwant:\n%s", after, before)
	}
	if after := e.dump(cat); after != catBefore {
		t.Fatalf("cat's tree after reopening:\n%s\nwant:\n%s", after, catBefore)
	}
	h2, err := e.s.Head(e.ctx, ann)
	if err != nil {
		t.Fatal(err)
	}
	if h2.Seq != head.Seq || h2.Hash != head.Hash || h2.Root != head.Root {
		t.Fatalf("head after reopening %d %s %s, want %d %s %s", h2.Seq, h2.Hash, h2.Root, head.Seq, head.Hash, head.Root)
	}
	// Bob's read right, from the Access file in the checkpoint, holds.
	if _, err := e.as(bob).Lookup(e.ctx, "ann@example.com/docs/after.txt"); err != nil {
		t.Fatalf("bob's lookup after reopening: %v", err)
	}

	// A mirror or an auditor: the checkpoint and the entries after it.
	_, err = e.s.Entries(e.ctx, ann, ann, 1, 100)
	wantKind(t, err, spindle.NotExist, "entries from 1 of a compacted log")
	got, err := e.s.Checkpoint(e.ctx, ann, ann)
	if err != nil || got == nil || got.Seq != cp.Seq {
		t.Fatalf("Checkpoint: %v, %v", got, err)
	}
	_, err = e.s.Checkpoint(e.ctx, bob, ann)
	wantKind(t, err, spindle.Private, "bob reads ann's checkpoint")
	tail, err := e.s.Entries(e.ctx, ann, ann, cp.Seq+1, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(tail) != 3 {
		t.Fatalf("%d entries after the checkpoint, want 3", len(tail))
	}
	if err := got.Verify(e.ctx, e.keys, nil, e.host); err != nil {
		t.Fatal(err)
	}
	if err := dirlog.CheckLogFrom(got, tail, h2); err != nil {
		t.Fatalf("CheckLogFrom: %v", err)
	}
	wantKind(t, dirlog.CheckLogFrom(got, tail[:2], h2), spindle.Integrity, "a truncated tail")
	bad := *h2
	bad.Root[3] ^= 1
	wantKind(t, dirlog.CheckLogFrom(got, tail, &bad), spindle.Integrity, "a head with another root")

	raw, err := e.s.Export(e.ctx, ann, ann)
	if err != nil {
		t.Fatal(err)
	}
	catRaw, err := e.s.Export(e.ctx, cat, cat)
	if err != nil {
		t.Fatal(err)
	}
	reps, err := dirlog.Audit(e.ctx, map[spindle.UserName][]byte{ann: raw, cat: catRaw}, e.keys, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range reps {
		if r.Err != nil {
			t.Fatalf("audit of %s: %v", r.User, r.Err)
		}
	}
	if r := reps[0]; r.Entries != h2.Seq || r.Checkpoint != cp.Seq || r.Head != h2.Hash || r.Root != h2.Root {
		t.Fatalf("audit of ann: %+v; want %d entries, checkpoint %d", r, h2.Seq, cp.Seq)
	}
	// A tampered checkpoint in the exported bytes fails the audit.
	i := bytes.Index(raw, []byte("wrapped keys"))
	raw[i] ^= 1
	// Fix the frame's checksum so that only the checkpoint is wrong.
	reps, err = dirlog.Audit(e.ctx, map[spindle.UserName][]byte{ann: reframe(t, raw)}, e.keys, e.currentKeys)
	if err != nil {
		t.Fatal(err)
	}
	wantKind(t, reps[0].Err, spindle.Integrity, "audit of a tampered checkpoint")
}

// reframe recomputes the checksums of framed records.
func reframe(t *testing.T, data []byte) []byte {
	var out []byte
	off := 0
	for off < len(data) {
		n := int(uint32(data[off])<<24 | uint32(data[off+1])<<16 | uint32(data[off+2])<<8 | uint32(data[off+3]))
		out = dirlog.AppendFrame(out, data[off+dirlog.FrameSize:off+dirlog.FrameSize+n])
		off += dirlog.FrameSize + n
	}
	return out
}

// TestCompactAfter checks the automatic trigger: a log is compacted once
// it holds more than CompactAfter entries after its checkpoint.
func TestCompactAfter(t *testing.T) {
	st := &MemStore{}
	e := newEnv(t, st)
	e.s.Close()
	s, err := New(e.ctx, st, Config{Keys: e.keys, Host: e.host, Logger: slog.New(slog.DiscardHandler), CompactAfter: 5})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	e.s = s
	c := e.as(ann)
	e.do(c.MakeDirectory(e.ctx, "ann@example.com/"))
	for i := range 12 {
		e.do(c.Put(e.ctx, file(spindle.PathName(fmt.Sprintf("ann@example.com/f%d", i%3)), int64(i+1))))
		s.compactions() // In the background: wait, to know where it cut.
	}
	cp, err := s.Checkpoint(e.ctx, ann, ann)
	if err != nil || cp == nil {
		t.Fatalf("no checkpoint after 13 entries with CompactAfter 5: %v", err)
	}
	if cp.Seq != 12 {
		t.Errorf("checkpoint at %d, want 12 (compacted at 6 and at 12)", cp.Seq)
	}
	if len(cp.Entries) != 4 {
		t.Errorf("%d entries in the checkpoint of a root and 3 files", len(cp.Entries))
	}
	tail, err := s.Entries(e.ctx, ann, ann, cp.Seq+1, 100)
	if err != nil || len(tail) != 1 {
		t.Fatalf("tail: %d entries, %v", len(tail), err)
	}
}

// FuzzUnmarshalCheckpoint checks that the checkpoint decoder takes only
// canonical encodings, fails only with Invalid, and that folding any
// checkpoint it takes (as Verify does) fails cleanly or not at all.
func FuzzUnmarshalCheckpoint(f *testing.F) {
	e := newEnv(f, &MemStore{})
	e.grow()
	cp, err := e.s.Compact(e.ctx, ann)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(cp.Marshal())
	f.Add((&dirlog.Checkpoint{User: ann}).Marshal())
	f.Add([]byte("SPDLC1"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cp, err := dirlog.UnmarshalCheckpoint(data)
		if err != nil {
			if spindle.KindOf(err) != spindle.Invalid {
				t.Fatalf("error of kind %v: %v", spindle.KindOf(err), err)
			}
			return
		}
		if !bytes.Equal(cp.Marshal(), data) {
			t.Fatal("accepted a non-canonical encoding")
		}
		cp.Fold()
	})
}

// currentKeys is a key history in which every user has only held the
// current key.
func (e *env) currentKeys(ctx context.Context, u spindle.UserName) ([]dirlog.HeldKey, error) {
	k, err := e.keys(ctx, u)
	return []dirlog.HeldKey{{Key: k, Until: -1}}, err
}

// TestCheckpointKeyRotation checks that a checkpoint keeps entries signed
// with a key their writer has since replaced verifiable: with the key
// history the host starts from it whole; without one it refuses to start
// rather than take its own log for damaged.
func TestCheckpointKeyRotation(t *testing.T) {
	store := &MemStore{}
	e := newEnv(t, store)
	e.setup()
	if _, err := e.s.Compact(e.ctx, ann); err != nil {
		t.Fatal(err)
	}
	want := e.dump(ann)
	old := e.signers[ann]
	h, err := e.s.Head(e.ctx, ann)
	if err != nil {
		t.Fatal(err)
	}
	e.s.Close()
	e.mu.Lock()
	e.signers[ann] = newSigner(t, ann)
	e.mu.Unlock()
	_, err = New(e.ctx, store, Config{Keys: e.keys})
	wantKind(t, err, spindle.Integrity, "start from a checkpoint after rotation without history")
	if got := len(store.Cuts(ann)); got != 0 {
		t.Fatalf("%d cuts made", got)
	}
	e.history = func(ctx context.Context, u spindle.UserName) ([]dirlog.HeldKey, error) {
		k, _ := e.keys(ctx, u)
		if u == ann {
			return []dirlog.HeldKey{{Key: old.PublicKey(), Until: h.Seq}, {Key: k, Until: -1}}, nil
		}
		return []dirlog.HeldKey{{Key: k, Until: -1}}, nil
	}
	e.open()
	if got := e.dump(ann); got != want || len(e.s.Damage()) != 0 {
		t.Fatalf("start from a checkpoint with key history:\n%s\ndamage %v", got, e.s.Damage())
	}
	// A cutoff before the checkpoint's last entry: that entry was signed
	// with a key the writer had replaced, and the log is damaged.
	e.s.Close()
	e.history = func(ctx context.Context, u spindle.UserName) ([]dirlog.HeldKey, error) {
		k, _ := e.keys(ctx, u)
		return []dirlog.HeldKey{{Key: old.PublicKey(), Until: h.Seq - 1}, {Key: k, Until: -1}}, nil
	}
	e.open()
	if d := e.s.Damage(); len(d) != 1 || !errors.Is(d[0], spindle.Damaged) {
		t.Fatalf("checkpoint entry past the cutoff accepted: damage %v", d)
	}
}
