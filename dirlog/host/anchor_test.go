package host

import (
	"errors"
	"log/slog"
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
