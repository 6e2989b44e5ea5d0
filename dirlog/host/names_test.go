package host

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"spindle.dev/dirlog"

	"spindle.dev"
)

// badElems are elements no new name may hold (see spindle.CheckElem).
var badElems = []struct{ what, elem string }{
	{"escape", "a\x1b[2Jb"},
	{"newline", "two\nlines"},
	{"carriage return", "fake\rline"},
	{"tab", "tab\tbed"},
	{"NUL", "nul\x00"},
	{"DEL", "del\x7f"},
	{"C1 NEL", "c1\u0085"},
	{"C1 CSI", "csi\u009b2J"},
	{"line separator", "ls\u2028x"},
	{"invalid UTF-8", "bad\xffutf8"},
	{"truncated UTF-8", "caf\xc3"},
}

// rawEntry signs an entry for the next place in name's tree as w would,
// without any of the client's checks: what a hostile client sends.
func (e *env) rawEntry(w spindle.UserName, op dirlog.Operation, d spindle.DirEntry, newName spindle.PathName) *dirlog.Entry {
	e.t.Helper()
	p, err := spindle.Parse(d.Name)
	if err != nil {
		e.t.Fatal(err)
	}
	h, err := e.s.Head(e.ctx, p.User())
	if err != nil {
		e.t.Fatal(err)
	}
	en := &dirlog.Entry{Seq: h.Seq + 1, Prev: h.Hash, Time: spindle.Now(), Op: op, Entry: d, NewName: newName}
	en.Entry.Sequence = en.Seq
	if op == dirlog.OpMkdir || op == dirlog.OpLink {
		en.Entry.Time = en.Time
	}
	if err := en.Sign(e.signers[w]); err != nil {
		e.t.Fatal(err)
	}
	return en
}

// countingSeq counts the appends that reach the sequencer.
type countingSeq struct {
	dirlog.Sequencer
	n atomic.Int64
}

func (c *countingSeq) Append(ctx context.Context, e *dirlog.Entry) (*spindle.DirEntry, error) {
	c.n.Add(1)
	return c.Sequencer.Append(ctx, e)
}

func (c *countingSeq) AppendBatch(ctx context.Context, es []*dirlog.Entry) ([]*spindle.DirEntry, error) {
	c.n.Add(1)
	return c.Sequencer.AppendBatch(ctx, es)
}

// Every name an entry brings into a tree is checked: by the client before
// it signs (nothing reaches the dir host) and by the dir host for an entry
// signed without the client's checks. Neither changes the tree.
func TestNewNamesChecked(t *testing.T) {
	e := newEnv(t, &MemStore{})
	e.setup()
	ctx := e.ctx
	const dir = "ann@example.com/docs/"
	for _, tc := range badElems {
		bad := spindle.PathName(dir + tc.elem)
		for _, op := range []struct {
			name   string
			client func(c *dirlog.Client, seq dirlog.Sequencer) error
			raw    *dirlog.Entry
		}{
			{"put", func(c *dirlog.Client, seq dirlog.Sequencer) error {
				_, err := dirlog.Submit(ctx, seq, e.signers[ann], dirlog.OpPut, file(bad, 10), "")
				return err
			}, e.rawEntry(ann, dirlog.OpPut, *file(bad, 10), "")},
			{"put batch", func(c *dirlog.Client, seq dirlog.Sequencer) error {
				_, errs := c.PutBatch(ctx, []*spindle.DirEntry{file(bad, 10)})
				return errs[0]
			}, nil},
			{"mkdir", func(c *dirlog.Client, seq dirlog.Sequencer) error {
				_, err := dirlog.Submit(ctx, seq, e.signers[ann], dirlog.OpMkdir, &spindle.DirEntry{Name: bad, Attr: spindle.AttrDirectory}, "")
				return err
			}, e.rawEntry(ann, dirlog.OpMkdir, spindle.DirEntry{Name: bad, Attr: spindle.AttrDirectory}, "")},
			{"link name", func(c *dirlog.Client, seq dirlog.Sequencer) error {
				_, err := dirlog.Submit(ctx, seq, e.signers[ann], dirlog.OpLink, &spindle.DirEntry{Name: bad, Attr: spindle.AttrLink, Link: dir + "a.txt"}, "")
				return err
			}, e.rawEntry(ann, dirlog.OpLink, spindle.DirEntry{Name: bad, Attr: spindle.AttrLink, Link: dir + "a.txt"}, "")},
			{"link target", func(c *dirlog.Client, seq dirlog.Sequencer) error {
				_, err := dirlog.Submit(ctx, seq, e.signers[ann], dirlog.OpLink, &spindle.DirEntry{Name: dir + "ln", Attr: spindle.AttrLink, Link: bad}, "")
				return err
			}, e.rawEntry(ann, dirlog.OpLink, spindle.DirEntry{Name: dir + "ln", Attr: spindle.AttrLink, Link: bad}, "")},
			{"rename destination", func(c *dirlog.Client, seq dirlog.Sequencer) error {
				_, err := dirlog.Submit(ctx, seq, e.signers[ann], dirlog.OpRename, &spindle.DirEntry{Name: dir + "a.txt"}, bad)
				return err
			}, e.rawEntry(ann, dirlog.OpRename, spindle.DirEntry{Name: dir + "a.txt"}, bad)},
		} {
			before := e.dump(ann)
			seq := &countingSeq{Sequencer: e.s}
			err := op.client(e.as(ann), seq)
			wantKind(t, err, spindle.Invalid, tc.what+": client "+op.name)
			if seq.n.Load() != 0 {
				t.Errorf("%s: client %s sent the entry to the dir host", tc.what, op.name)
			}
			if op.raw != nil {
				_, err := e.s.Append(ctx, op.raw)
				wantKind(t, err, spindle.Invalid, tc.what+": raw "+op.name)
				if !strings.Contains(err.Error(), "element") {
					t.Errorf("%s: raw %s: error %q does not name the element", tc.what, op.name, err)
				}
			}
			if after := e.dump(ann); after != before {
				t.Fatalf("%s: %s changed the tree:\n%s\nwas:\n%s", tc.what, op.name, after, before)
			}
		}
	}
	// A name with a trailing slash is not clean: the dir host refuses it.
	_, err := e.s.Append(ctx, e.rawEntry(ann, dirlog.OpPut, *file(dir+"w/", 10), ""))
	wantKind(t, err, spindle.Invalid, "trailing slash")
	if _, err := e.s.Lookup(ctx, ann, dir+"w"); !spindle.Match(spindle.E(spindle.NotExist), err) {
		t.Errorf("trailing slash made a file w: %v", err)
	}
	// Good names with non-ASCII letters, spaces and symbols are fine.
	for _, good := range []spindle.PathName{dir + "café", dir + "a b", dir + "日本語", dir + "x😀y", dir + `"quoted"`} {
		e.do(e.as(ann).Put(ctx, file(good, 1)))
	}
}

// A log written before the name rules may hold names they refuse. Replay
// keeps such entries (they were valid when written); their owner can still
// delete or rename them, but nobody can write to such a name again.
func TestOldNamesReplay(t *testing.T) {
	e := newEnv(t, &MemStore{})
	e.setup()
	ctx := e.ctx
	olds := []spindle.PathName{
		"ann@example.com/docs/\x1b[2Jgotcha",
		"ann@example.com/docs/fake\n- ok line",
		"ann@example.com/docs/bad\xff",
		"ann@example.com/docs/keep\x07",
	}
	// Store entries with the old names as a dir host without the rules
	// would have: past every check of Append.
	var recs [][]byte
	for _, name := range olds {
		en := e.rawEntry(ann, dirlog.OpPut, *file(name, 10), "")
		recs = append(recs, (&dirlog.Record{Entry: en.Marshal(), Key: e.signers[ann].PublicKey()}).Marshal())
		// Reopen after each, so that the next raw entry follows this one.
		if err := e.s.Close(); err != nil {
			t.Fatal(err)
		}
		l, err := e.store.Open(ctx, ann)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Append(ctx, recs[len(recs)-1]); err != nil {
			t.Fatal(err)
		}
		l.Close()
		e.open()
		if d := e.s.Damage(); len(d) != 0 {
			t.Fatalf("replay reported damage for old name %q: %v", name, d)
		}
	}
	for _, name := range olds {
		if _, err := e.s.Lookup(ctx, ann, name); err != nil {
			t.Fatalf("old name %q lost in replay: %v", name, err)
		}
	}
	c := e.as(ann)
	// Writing to an old bad name again is refused.
	_, err := c.Put(ctx, file(olds[0], 20))
	wantKind(t, err, spindle.Invalid, "overwrite old bad name")
	// The owner deletes one and renames another to a good name.
	e.do(c.Delete(ctx, olds[0]))
	e.do(c.Rename(ctx, olds[1], "ann@example.com/docs/renamed"))
	e.do(c.Delete(ctx, olds[2]))
	// All of it survives a restart.
	e.reopen()
	if d := e.s.Damage(); len(d) != 0 {
		t.Fatalf("replay reported damage: %v", d)
	}
	for _, name := range olds[:3] {
		if _, err := e.s.Lookup(ctx, ann, name); !spindle.Match(spindle.E(spindle.NotExist), err) {
			t.Errorf("%q after delete or rename: %v", name, err)
		}
	}
	if _, err := e.s.Lookup(ctx, ann, olds[3]); err != nil {
		t.Errorf("old name %q lost: %v", olds[3], err)
	}
	if _, err := e.s.Lookup(ctx, ann, "ann@example.com/docs/renamed"); err != nil {
		t.Errorf("renamed: %v", err)
	}
}
