package host

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"spindle.dev/dirlog"

	"spindle.dev"
)

// A host remembers how far it stored each log: a log deleted, or cut
// short of entries the host acknowledged, is damaged when the server
// opens, never served as an older state nor replaced by a new tree.
// Repair accepts it as it is, saying what was lost.
func TestLostEntriesAreDamage(t *testing.T) {
	for _, c := range []struct {
		what  string
		store func(t *testing.T) (Store, func(keep int))
	}{
		{"memory", func(t *testing.T) (Store, func(int)) {
			st := new(MemStore)
			return st, func(keep int) {
				if keep < 0 {
					st.Delete(ann)
					return
				}
				b := st.Bytes(ann)
				offs, _, _ := dirlog.ScanFrames(bytes.NewReader(b), 0, func([]byte) error { return nil })
				st.SetBytes(ann, b[:offs[keep]])
			}
		}},
		{"disk", func(t *testing.T) (Store, func(int)) {
			dir := t.TempDir()
			st, err := DiskStore(dir)
			if err != nil {
				t.Fatal(err)
			}
			name := filepath.Join(dir, string(ann)+logSuffix)
			return st, func(keep int) {
				if keep < 0 {
					if err := os.Remove(name); err != nil {
						t.Fatal(err)
					}
					return
				}
				b, err := os.ReadFile(name)
				if err != nil {
					t.Fatal(err)
				}
				offs, _, _ := dirlog.ScanFrames(bytes.NewReader(b[len(dirlog.FileHeader):]), int64(len(dirlog.FileHeader)), func([]byte) error { return nil })
				if err := os.WriteFile(name, b[:offs[keep]], 0o600); err != nil {
					t.Fatal(err)
				}
			}
		}},
	} {
		for _, loss := range []struct {
			what string
			keep int
		}{{"deleted", -1}, {"cut to 3 of 5 entries", 3}} {
			t.Run(c.what+"/"+loss.what, func(t *testing.T) {
				st, lose := c.store(t)
				e := newEnv(t, st)
				e.setup() // 5 entries.
				e.do(e.as(bob).MakeDirectory(e.ctx, "bob@example.com/"))
				bobBefore := e.dump(bob)
				if err := e.s.Close(); err != nil {
					t.Fatal(err)
				}
				lose(loss.keep)
				e.open()
				if len(e.s.Damage()) != 1 || len(e.s.Damaged()) != 1 {
					t.Fatalf("damage after the log was %s: %v", loss.what, e.s.Damage())
				}
				if got := e.dump(bob); got != bobBefore {
					t.Errorf("bob's log, untouched, is not served as before:\n%s", got)
				}
				a := e.as(ann)
				_, err := a.Lookup(e.ctx, "ann@example.com/docs/a.txt")
				wantKind(t, err, spindle.Damaged, "lookup")
				_, err = a.MakeDirectory(e.ctx, "ann@example.com/")
				wantKind(t, err, spindle.Damaged, "a new root over the lost log")
				// Opened again, it is still damaged: nothing was cut or marked.
				e.reopen()
				if len(e.s.Damaged()) != 1 {
					t.Fatalf("reopened: damage %v", e.s.Damage())
				}
				// The operator's repair accepts it as it is.
				e.repair = []spindle.UserName{ann}
				e.reopen()
				if len(e.s.Damaged()) != 0 || len(e.s.Damage()) != 1 {
					t.Fatalf("repaired: damaged %v, reported %v", e.s.Damaged(), e.s.Damage())
				}
				a = e.as(ann)
				if loss.keep < 0 {
					e.do(a.MakeDirectory(e.ctx, "ann@example.com/"))
				} else {
					e.do(a.Lookup(e.ctx, "ann@example.com/docs/a.txt"))
					e.do(a.MakeDirectory(e.ctx, "ann@example.com/more"))
				}
				e.repair = nil
				e.reopen()
				if d := e.s.Damage(); len(d) != 0 {
					t.Fatalf("after the repair and a write: %v", d)
				}
			})
		}
	}
}

// FuzzMarks opens a store whose marks file holds arbitrary bytes, as a
// damaged disk or a crash may leave it: it must not panic, must return
// marks of clean user names (those before any damage, which it reports
// as Integrity), and must go on recording marks that a reopening reads
// back.
func FuzzMarks(f *testing.F) {
	f.Add([]byte{})
	f.Add(dirlog.AppendFrame(nil, encodeMark(ann, Mark{Seq: 3, Hash: dirlog.Hash{1}})))
	f.Add(dirlog.AppendFrame(dirlog.AppendFrame(nil, encodeMark(ann, Mark{Seq: 3})), encodeMark(ann, Mark{Seq: -1})))
	f.Add(dirlog.AppendFrame(nil, []byte("short")))
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, marksFile), data, 0o600); err != nil {
			t.Fatal(err)
		}
		st, err := DiskStore(dir)
		if err != nil {
			t.Fatal(err)
		}
		mk := st.(Marker)
		ctx := context.Background()
		marks, err := mk.Marks(ctx)
		if err != nil && !errors.Is(err, spindle.Integrity) {
			t.Fatalf("a damaged marks file: %v, want Integrity", err)
		}
		for u, m := range marks {
			if cu, err := spindle.CleanUser(u); err != nil || cu != u || m.Seq < 0 {
				t.Fatalf("mark of %q at %d", u, m.Seq)
			}
		}
		if err := mk.Mark(ctx, bob, Mark{Seq: 7, Hash: dirlog.Hash{7}}); err != nil {
			t.Fatal(err)
		}
		st.(interface{ closeMarks() }).closeMarks()
		again, err := mk.Marks(ctx)
		if err != nil || again[bob] != (Mark{Seq: 7, Hash: dirlog.Hash{7}}) {
			t.Fatalf("reopened: %v, %v", again, err)
		}
	})
}
