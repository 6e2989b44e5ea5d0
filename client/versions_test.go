package client

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"spindle.dev"
	"spindle.dev/dirlog"
	"spindle.dev/node/wire"
	"spindle.dev/node/wire/wiretest"
)

// A file put, overwritten, renamed and deleted is read back at each
// sequence and each time, byte-identical, from the proved log; History
// lists each step; a node that serves another version under a past
// sequence is caught; and a reader other than the owner gets Private.
func TestVersionsReadBack(t *testing.T) {
	w := newLieWorld(t)
	ctx := w.ctx
	seqNow := func() int64 {
		t.Helper()
		tr, err := w.ann.TreeAt(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		return tr.Seq
	}
	const x, y = "ann@example.com/docs/x.txt", "ann@example.com/docs/y.txt"
	w.put(t, x, "version one")
	s1 := seqNow()
	time.Sleep(2 * time.Millisecond)
	w.put(t, x, "version two, longer")
	s2 := seqNow()
	if err := w.ann.Rename(ctx, x, y); err != nil {
		t.Fatal(err)
	}
	s3 := seqNow()
	if err := w.ann.Delete(ctx, y); err != nil {
		t.Fatal(err)
	}
	s4 := seqNow()
	read := func(name spindle.PathName, seq int64) (string, error) {
		past, err := w.ann.PastAt(ctx, seq, time.Time{})
		if err != nil {
			return "", err
		}
		f, err := past.Open(ctx, name)
		if err != nil {
			return "", err
		}
		defer f.Close()
		b, err := io.ReadAll(f)
		return string(b), err
	}
	for _, tc := range []struct {
		name spindle.PathName
		seq  int64
		want string // "" for NotExist.
	}{
		{x, s1 - 1, ""}, {x, s1, "version one"}, {x, s2, "version two, longer"},
		{x, s3, ""}, {y, s3, "version two, longer"}, {y, s4, ""},
	} {
		got, err := read(tc.name, tc.seq)
		if tc.want == "" {
			if !errors.Is(err, spindle.NotExist) {
				t.Errorf("%s at %d: got %q, %v, want NotExist", tc.name, tc.seq, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s at %d: got %q, %v, want %q", tc.name, tc.seq, got, err, tc.want)
		}
	}
	// At a time: that of entry s1 reads version one.
	cp, tail, _, err := w.ann.provedLog(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var t1 time.Time
	for _, e := range tail {
		if e.Seq == s1 {
			t1 = e.Time.Go()
		}
	}
	if got := seqAt(cp, tail, t1); got != s1 {
		t.Errorf("seqAt(time of %d) = %d", s1, got)
	}
	if p, err := w.ann.PastAt(ctx, 0, t1); err != nil || p.Seq() != s1 {
		t.Errorf("PastAt(time of %d): %v", s1, err)
	} else if f, err := p.Open(ctx, x); err != nil {
		t.Errorf("open at time of %d: %v", s1, err)
	} else if b, err := io.ReadAll(f); err != nil || string(b) != "version one" {
		t.Errorf("read at time of %d: %q, %v", s1, b, err)
	}
	if _, err := w.ann.PastAt(ctx, 0, t1.Add(-time.Hour)); !errors.Is(err, spindle.NotExist) {
		t.Errorf("PastAt an hour before the first entry: %v, want NotExist", err)
	}
	// History of the old name: put, put, rename; of the new: rename, delete.
	hx, err := w.ann.History(ctx, x)
	if err != nil {
		t.Fatal(err)
	}
	if len(hx) != 3 || hx[0].Seq != s1 || hx[0].Size != int64(len("version one")) || hx[1].Seq != s2 || hx[2].Op != "rename" || hx[2].NewName != y || hx[0].Writer != "ann@example.com" {
		t.Errorf("history of %s: %+v", x, hx)
	}
	hy, err := w.ann.History(ctx, y)
	if err != nil || len(hy) != 2 || hy[0].Seq != s3 || hy[1].Seq != s4 || hy[1].Op != "delete" {
		t.Errorf("history of %s: %+v, %v", y, hy, err)
	}
	p2, err := w.ann.PastAt(ctx, s2, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	ls, err := p2.List("ann@example.com/docs")
	if err != nil || len(ls) != 4 || ls[3].Name != x {
		t.Errorf("docs at %d: %v, %v", s2, ls, err)
	}
	if g, err := p2.Glob("ann@example.com/docs/*.txt"); err != nil || len(g) != 3 || g[2].Name != x {
		t.Errorf("glob at %d: %v, %v", s2, g, err)
	}

	// A node that serves version one's entry under sequence s2 is caught.
	w.l.tell(func(req *wiretest.Request, resp *wiretest.Response) {
		if req.Method != wire.DirEntries {
			return
		}
		var one []byte
		for _, b := range resp.Log {
			if e, _ := dirlog.UnmarshalEntry(b); e != nil && e.Seq == s1 {
				one = b
			}
		}
		for i, b := range resp.Log {
			if e, _ := dirlog.UnmarshalEntry(b); e != nil && e.Seq == s2 && one != nil {
				o, _ := dirlog.UnmarshalEntry(one)
				o.Seq, o.Prev = e.Seq, e.Prev
				resp.Log[i] = o.Marshal()
			}
		}
	})
	_, err = read(x, s2)
	w.l.tell(nil)
	wantIntegrity(t, err, "version one served as sequence s2")

	// Others get Private, for the past as for the log.
	mp, err := w.mallory.PastAt(ctx, 0, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mp.Open(ctx, x); !errors.Is(err, spindle.Private) {
		t.Errorf("mallory reading ann's past: %v, want Private", err)
	}
	if _, err := w.mallory.History(ctx, x); !errors.Is(err, spindle.Private) {
		t.Errorf("mallory reading ann's history: %v, want Private", err)
	}
}

// Deleted lists a folder removed with what was in it once, as the
// folder, from before its first deletion; a file deleted and one moved
// away each on their own; and not a file deleted and put again. Restore
// brings the folder back whole, and a file into folders it makes; others
// get Private.
func TestDeletedAndRestore(t *testing.T) {
	w := newLieWorld(t)
	ctx := w.ctx
	w.mkdir(t, "@/album")
	w.mkdir(t, "@/album/sub")
	w.put(t, "@/album/p1.jpg", "photo one")
	w.put(t, "@/album/sub/p2.jpg", "photo two")
	w.put(t, "@/docs/gone.txt", "gone for good")
	w.put(t, "@/docs/moved.txt", "moved away")
	w.put(t, "@/docs/back.txt", "back again")
	before, err := w.ann.TreeAt(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range []func() error{
		func() error { return w.ann.Delete(ctx, "@/docs/gone.txt") },
		func() error { return w.ann.Rename(ctx, "@/docs/moved.txt", "@/moved.txt") },
		func() error { return w.ann.Delete(ctx, "@/docs/back.txt") },
		func() error {
			_, err := w.ann.Put(ctx, "@/docs/back.txt", strings.NewReader("back"), 0, nil)
			return err
		},
		func() error { return w.ann.Delete(ctx, "@/album/sub/p2.jpg") },
		func() error { return w.ann.Delete(ctx, "@/album/sub") },
		func() error { return w.ann.Delete(ctx, "@/album/p1.jpg") },
		func() error { return w.ann.Delete(ctx, "@/album") },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	names := func(rs []Removed) string {
		var s []string
		for _, r := range rs {
			s = append(s, fmt.Sprintf("%s %s", r.Op, r.Name))
		}
		return strings.Join(s, ", ")
	}
	all, err := w.ann.Deleted(ctx, "@/")
	if err != nil {
		t.Fatal(err)
	}
	const want = "delete ann@example.com/album, rename ann@example.com/docs/moved.txt, delete ann@example.com/docs/gone.txt"
	if got := names(all); got != want {
		t.Fatalf("deleted under the root: %s\nwant %s", got, want)
	}
	album := all[0]
	if !album.Dir || album.Seq != before.Seq+4 || album.Writer != "ann@example.com" {
		t.Errorf("the album: %+v, want a folder there last at %d", album, before.Seq+4)
	}
	if all[1].NewName != "ann@example.com/moved.txt" || all[2].Size != int64(len("gone for good")) || all[2].Seq != before.Seq {
		t.Errorf("the files: %+v", all[1:])
	}
	docs, err := w.ann.Deleted(ctx, "@/docs")
	if err != nil || names(docs) != "rename ann@example.com/docs/moved.txt, delete ann@example.com/docs/gone.txt" {
		t.Errorf("deleted under docs: %s, %v", names(docs), err)
	}

	past, err := w.ann.PastAt(ctx, album.Seq, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := w.ann.Restore(ctx, past, album.Name, album.Name)
	if err != nil || res.Files != 2 || len(res.Skipped) != 0 {
		t.Fatalf("restoring the album: %+v, %v", res, err)
	}
	read := func(name spindle.PathName) string {
		t.Helper()
		f, err := w.ann.Open(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		b, err := io.ReadAll(f)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if got := read("@/album/sub/p2.jpg"); got != "photo two" {
		t.Errorf("restored p2.jpg holds %q", got)
	}
	if all, err := w.ann.Deleted(ctx, "@/"); err != nil || strings.Contains(names(all), "album") {
		t.Errorf("after the restore: %s, %v", names(all), err)
	}
	// A file into folders that are not there; Access files are skipped.
	past, err = w.ann.PastAt(ctx, all[len(all)-1].Seq, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := w.ann.Restore(ctx, past, "@/docs/gone.txt", "@/new/place/gone.txt"); err != nil || res.Files != 1 {
		t.Fatalf("restoring into new folders: %+v, %v", res, err)
	}
	if got := read("@/new/place/gone.txt"); got != "gone for good" {
		t.Errorf("restored gone.txt holds %q", got)
	}
	if res, err := w.ann.Restore(ctx, past, "@/docs", "@/docs2"); err != nil || len(res.Skipped) != 1 || res.Skipped[0] != "ann@example.com/docs/Access" {
		t.Errorf("restoring docs: %+v, %v, want its Access file skipped", res, err)
	}
	if _, err := w.mallory.Deleted(ctx, "ann@example.com/"); !errors.Is(err, spindle.Private) {
		t.Errorf("mallory listing ann's deleted files: %v, want Private", err)
	}
}

// A removal is one only while its deletions come no more than removalGap
// apart and remove names under the folder.
func TestRunStart(t *testing.T) {
	at := func(min int) spindle.Time {
		return spindle.Time(time.Date(2026, 12, 4, 10, min, 0, 0, time.UTC).UnixNano())
	}
	del := func(seq int64, min int, name spindle.PathName) *dirlog.Entry {
		e := &dirlog.Entry{Seq: seq, Time: at(min), Op: dirlog.OpDelete}
		e.Entry.Name = name
		return e
	}
	tail := []*dirlog.Entry{
		del(1, 0, "ann@example.com/f/old.txt"),
		del(2, 5, "ann@example.com/f/a.txt"),
		del(3, 5, "ann@example.com/other.txt"),
		del(4, 6, "ann@example.com/f/b.txt"),
		del(5, 6, "ann@example.com/f/c.txt"),
		del(6, 6, "ann@example.com/f"),
	}
	if got := runStart(tail, 5); got != 3 {
		t.Errorf("runStart = %d, want 3 (b.txt: other.txt is not under f)", got)
	}
	tail[2] = del(3, 5, "ann@example.com/f/x.txt")
	if got := runStart(tail, 5); got != 1 {
		t.Errorf("runStart = %d, want 1 (a.txt: old.txt went 5 minutes before)", got)
	}
}
