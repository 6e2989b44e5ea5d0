package host

import (
	"bytes"
	"errors"
	"testing"

	"spindle.dev/dirlog"

	"spindle.dev"
)

// TestWhichAccessProved checks WhichAccess answers with their proofs: the
// governing Access file with the absence of every nearer one, and no
// Access file at all; that each proof survives its encoding; and that a
// proof of a farther Access file, one with a nearer one left out, or an
// older Access file's entries, fails.
func TestWhichAccessProved(t *testing.T) {
	e := newEnv(t, &MemStore{})
	e.setup()
	c := e.as(ann)
	check := func(name spindle.PathName, want spindle.PathName, absent int) *dirlog.AccessProved {
		t.Helper()
		d, ap, err := e.s.WhichAccessProved(e.ctx, ann, name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := ap.Head.Verify(e.host); err != nil {
			t.Fatal(err)
		}
		if err := ap.Verify(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got := spindle.PathName("")
		if d != nil {
			got = d.Name
		}
		if got != want || (ap.Found == nil) != (want == "") || ap.Found != nil && ap.Found.Name != want || len(ap.Absent) != absent {
			t.Fatalf("%s: governed by %q with %d absences, want %q with %d", name, got, len(ap.Absent), want, absent)
		}
		// Through the encoding and back.
		dec := &dirlog.AccessProved{Head: ap.Head, Name: ap.Name}
		if ap.Found != nil {
			dec.Found = roundTrip(t, ap.Found)
		}
		for _, pr := range ap.Absent {
			dec.Absent = append(dec.Absent, roundTrip(t, pr))
		}
		if err := dec.Verify(); err != nil {
			t.Fatalf("%s after encoding: %v", name, err)
		}
		return ap
	}
	check("ann@example.com/docs/sub/b.txt", "", 4)
	e.do(c.Put(e.ctx, control("ann@example.com/Access", "r: bob@example.com\n")))
	root := check("ann@example.com/docs/sub/b.txt", "ann@example.com/Access", 3)
	e.do(c.Put(e.ctx, control("ann@example.com/docs/Access", "r: cat@example.com\n")))
	old := check("ann@example.com/docs/sub/b.txt", "ann@example.com/docs/Access", 2)
	e.do(c.Put(e.ctx, control("ann@example.com/docs/Access", "r: dan@example.com\n")))
	ap := check("ann@example.com/docs/sub/b.txt", "ann@example.com/docs/Access", 2)
	check("ann@example.com/docs/Access", "ann@example.com/docs/Access", 0)
	check("ann@example.com/docs", "ann@example.com/docs/Access", 0)

	lies := map[string]func(ap *dirlog.AccessProved){
		"a farther Access file": func(ap *dirlog.AccessProved) {
			ap.Found = root.Found
			ap.Absent = append(ap.Absent, root.Absent[2])
		},
		"a nearer one left out":   func(ap *dirlog.AccessProved) { ap.Absent = ap.Absent[1:] },
		"no Access file":          func(ap *dirlog.AccessProved) { ap.Found = nil },
		"an older Access file":    func(ap *dirlog.AccessProved) { ap.Found.Entries, ap.Found.Value = old.Found.Entries, old.Found.Value },
		"no entries":              func(ap *dirlog.AccessProved) { ap.Found.Entries = nil },
		"absences out of order":   func(ap *dirlog.AccessProved) { ap.Absent[0], ap.Absent[1] = ap.Absent[1], ap.Absent[0] },
		"an inclusion as absence": func(ap *dirlog.AccessProved) { ap.Absent[0] = ap.Found },
	}
	for what, lie := range lies {
		c := *ap
		f := *ap.Found
		c.Found = &f
		c.Absent = append([]*dirlog.Proved(nil), ap.Absent...)
		lie(&c)
		if err := c.Verify(); !errors.Is(err, spindle.Integrity) {
			t.Errorf("%s: %v, want Integrity", what, err)
		}
	}
	// A user with no right gets no proof.
	if _, ap, err := e.s.WhichAccessProved(e.ctx, dan, "ann@example.com/docs/a.txt"); !errors.Is(err, spindle.Private) || ap != nil {
		t.Errorf("dan: %v, %v; want Private and no proof", ap, err)
	}
}

func roundTrip(t *testing.T, pr *dirlog.Proved) *dirlog.Proved {
	t.Helper()
	b := pr.Marshal()
	dec, err := dirlog.UnmarshalProved(b)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(dec.Marshal(), b) {
		t.Fatal("Proved encoding does not round-trip")
	}
	return dec
}

// FuzzUnmarshalProved checks that the decoder of proofs from untrusted
// peers refuses with Invalid or returns a Proved whose encoding is the
// input, and never panics.
func FuzzUnmarshalProved(f *testing.F) {
	e := newEnv(f, &MemStore{})
	e.setup()
	for _, name := range []spindle.PathName{"ann@example.com/docs/a.txt", "ann@example.com/nothing", "ann@example.com/docs"} {
		_, pr, _ := e.s.LookupProved(e.ctx, ann, name)
		f.Add(pr.Marshal())
	}
	f.Add([]byte("SPDLP1"))
	f.Fuzz(func(t *testing.T, data []byte) {
		pr, err := dirlog.UnmarshalProved(data)
		if err != nil {
			if spindle.KindOf(err) != spindle.Invalid {
				t.Fatalf("error of kind %v: %v", spindle.KindOf(err), err)
			}
			return
		}
		if !bytes.Equal(pr.Marshal(), data) {
			t.Fatal("accepted a non-canonical encoding")
		}
	})
}
