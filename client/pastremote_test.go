package client

import (
	"crypto/rand"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"spindle.dev"
	"spindle.dev/dirlog"
	"spindle.dev/node/wire"
	"spindle.dev/node/wire/wiretest"
	"spindle.dev/p2p"
)

// TestPastOfOthers: a reader other than the owner reads the past of her
// tree through its dir host, with the rights of then and of now both
// required, each answer proved against a head of that state that the
// reader checks against the newest head it holds; a host that answers
// with the present, or with a state the log does not hold, is caught.
func TestPastOfOthers(t *testing.T) {
	w := newLieWorld(t)
	ctx := w.ctx
	cat := dialAs(t, w.n, "cat@example.com")
	seq := func() int64 {
		t.Helper()
		tr, err := w.ann.TreeAt(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		return tr.Seq
	}
	const catReads = "read, list: cat@example.com\n*: ann@example.com\n"
	w.mkdir(t, "@/open")
	w.put(t, "@/open/Access", catReads)
	w.put(t, "@/open/y", "version one")
	s1 := seq()
	w.put(t, "@/open/y", "version two")
	s2 := seq()
	w.mkdir(t, "@/shared")
	w.put(t, "@/shared/Access", catReads)
	w.put(t, "@/shared/x", "cat could read it then")
	s3 := seq()
	w.mkdir(t, "@/later")
	w.put(t, "@/later/Access", "*: ann@example.com\n")
	w.put(t, "@/later/f", "cat could not read it then")
	s4 := seq()
	w.put(t, "@/later/Access", catReads)
	w.put(t, "@/shared/Access", "*: ann@example.com\n") // Cat is removed.
	w.put(t, "@/open/y", "version three")

	read := func(seq int64, name spindle.PathName) (string, error) {
		p, err := cat.PastOf(ctx, "ann@example.com", seq, time.Time{})
		if err != nil {
			return "", err
		}
		if p.Seq() != seq {
			t.Fatalf("PastOf(%d) is of sequence %d", seq, p.Seq())
		}
		f, err := p.Open(ctx, name)
		if err != nil {
			return "", err
		}
		defer f.Close()
		b, err := io.ReadAll(f)
		return string(b), err
	}
	for _, tc := range []struct {
		seq        int64
		name, want string
		kind       spindle.Kind // Of the error, if want is "".
	}{
		{s1, "ann@example.com/open/y", "version one", 0},
		{s2, "ann@example.com/open/y", "version two", 0},
		{s3, "ann@example.com/shared/x", "", spindle.Private},   // Readable then, not now.
		{s4, "ann@example.com/later/f", "", spindle.Private},    // Readable now, not then.
		{s1, "ann@example.com/open/gone", "", spindle.NotExist}, // Proved absent.
	} {
		got, err := read(tc.seq, spindle.PathName(tc.name))
		if tc.want != "" {
			if err != nil || got != tc.want {
				t.Errorf("%s at %d: %q, %v; want %q", tc.name, tc.seq, got, err, tc.want)
			}
			continue
		}
		if !errors.Is(err, tc.kind) {
			t.Errorf("%s at %d: %q, %v; want %v", tc.name, tc.seq, got, err, tc.kind)
		}
	}
	p, err := cat.PastOf(ctx, "ann@example.com", s2, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if ls, err := p.List("ann@example.com/open"); err != nil || len(ls) != 2 || ls[1].Name != "ann@example.com/open/y" {
		t.Errorf("cat lists open at %d: %v, %v", s2, ls, err)
	}
	// Mallory, with no right anywhere in the tree, learns nothing.
	if mp, err := w.mallory.PastOf(ctx, "ann@example.com", s1, time.Time{}); err != nil {
		t.Fatal(err)
	} else if _, err := mp.Lookup("ann@example.com/open/y"); !errors.Is(err, spindle.Private) {
		t.Errorf("mallory reading ann's past: %v, want Private", err)
	}

	// A node that answers with the present, whole and honest (as one
	// that predates reads of the past does), is caught.
	var present *wiretest.Response
	w.l.tell(func(req *wiretest.Request, resp *wiretest.Response) {
		if req.Method == wire.DirLookup && req.At == 0 && req.Name == "ann@example.com/open/y" {
			c := *resp
			present = &c
		}
	})
	if _, err := cat.Lookup(ctx, "ann@example.com/open/y", false); err != nil {
		t.Fatal(err)
	}
	if present == nil || present.Head == nil {
		t.Fatal("no present answer to replay")
	}
	w.l.tell(func(req *wiretest.Request, resp *wiretest.Response) {
		if req.Method == wire.DirLookup && req.At != 0 {
			*resp = *present
		}
	})
	_, err = read(s1, "ann@example.com/open/y")
	w.l.tell(nil)
	wantIntegrity(t, err, "the present served for the past")

	// A state the log does not hold: a head at s1 with a made-up hash,
	// its log tree extended from the real one, signed with the host's
	// own key. The consistency proof with the newest head shows it.
	own, err := p2p.NewPeerSigner(w.n.Host())
	if err != nil {
		t.Fatal(err)
	}
	real := w.logHashes(t, s1-1)
	var made dirlog.Hash
	rand.Read(made[:])
	var fake dirlog.LogTree
	for _, h := range real {
		fake.Append(h)
	}
	fake.Append(made)
	root, _ := fake.Root(s1)
	w.l.tell(func(req *wiretest.Request, resp *wiretest.Response) {
		if req.Method == wire.DirLookup && req.At != 0 && resp.Head != nil {
			resp.Head.Hash, resp.Head.LogRoot = made, root
			resp.Head.Sign(own)
		}
	})
	_, err = read(s1, "ann@example.com/open/y")
	w.l.tell(nil)
	wantIntegrity(t, err, "a made-up state")
	if err != nil && !strings.Contains(err.Error(), "not one of the log") {
		t.Errorf("error does not say the state is not of the log: %v", err)
	}
}
