package client

import (
	"errors"
	"io"
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
