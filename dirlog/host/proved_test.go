package host

import (
	"errors"
	"fmt"
	"testing"

	"spindle.dev/dirlog"

	"spindle.dev"
)

// TestLookupProved checks Lookup answers with their proofs: an entry with
// the signed entries that make its value (after a rename of its
// directory too), a link met on the way, NotExist with an exclusion, an
// incomplete entry with its presence only, and no proof with a denial; and
// that a proof changed in any part fails.
func TestLookupProved(t *testing.T) {
	e := newEnv(t, &MemStore{})
	e.setup()
	c := e.as(ann)
	e.do(c.Put(e.ctx, control("ann@example.com/Access", "*: ann@example.com\nl: cat@example.com\n")))
	e.do(c.PutLink(e.ctx, "ann@example.com/docs", "ann@example.com/ln"))

	check := func(user spindle.UserName, name spindle.PathName, wantErr spindle.Kind, wantEnd dirlog.ProofEnd, wantEntries int) (*spindle.DirEntry, *dirlog.Proved) {
		t.Helper()
		d, pr, err := e.s.LookupProved(e.ctx, user, name)
		if wantErr == spindle.Other && err != nil || wantErr != spindle.Other && spindle.KindOf(err) != wantErr {
			t.Fatalf("%s as %s: error %v, want kind %v", name, user, err, wantErr)
		}
		if pr == nil {
			t.Fatalf("%s as %s: no proof", name, user)
		}
		if err := pr.Head.Verify(e.host); err != nil {
			t.Fatal(err)
		}
		if root, _ := dirlog.MapRoot(e.logEntries(ann)); pr.Head.Root != root {
			t.Fatalf("%s: head root %s, MapRoot %s", name, pr.Head.Root, root)
		}
		if err := pr.Verify(); err != nil {
			t.Fatalf("%s as %s: %v", name, user, err)
		}
		if pr.Proof.End != wantEnd || len(pr.Entries) != wantEntries {
			t.Fatalf("%s as %s: proof ends at %s with %d entries, want %s with %d", name, user, pr.Proof.End, len(pr.Entries), wantEnd, wantEntries)
		}
		return d, pr
	}

	d, pr := check(ann, "ann@example.com/docs/a.txt", spindle.Other, dirlog.EndIncluded, 1)
	if pr.Entries[0].Entry.Name != d.Name || pr.Entries[0].Op != dirlog.OpPut {
		t.Fatalf("entries %+v for %s", pr.Entries[0], d.Name)
	}
	tamper := map[string]func(p *dirlog.Proved){
		"value":       func(p *dirlog.Proved) { p.Value[0] ^= 1 },
		"name":        func(p *dirlog.Proved) { p.Name = "ann@example.com/docs/b.txt" },
		"root":        func(p *dirlog.Proved) { p.Head.Root[9] ^= 1 },
		"entry":       func(p *dirlog.Proved) { p.Entries[0].Time++ },
		"no entries":  func(p *dirlog.Proved) { p.Entries = []*dirlog.Entry{{Op: dirlog.OpDelete}} },
		"proof depth": func(p *dirlog.Proved) { p.Proof.Siblings = p.Proof.Siblings[1:] },
	}
	for what, change := range tamper {
		_, pr := check(ann, "ann@example.com/docs/a.txt", spindle.Other, dirlog.EndIncluded, 1)
		change(pr)
		wantKind(t, pr.Verify(), spindle.Integrity, "proof with another "+what)
	}

	e.do(c.Rename(e.ctx, "ann@example.com/docs", "ann@example.com/papers"))
	_, pr = check(ann, "ann@example.com/papers/sub/b.txt", spindle.Other, dirlog.EndIncluded, 2)
	if pr.Entries[1].Op != dirlog.OpRename {
		t.Fatalf("second entry is a %s, want the rename", pr.Entries[1].Op)
	}
	pr.Entries = pr.Entries[:1]
	wantKind(t, pr.Verify(), spindle.Integrity, "proof without the rename")

	_, pr = check(ann, "ann@example.com/docs/a.txt", spindle.NotExist, dirlog.EndEmpty, 0)
	if err := pr.VerifyNotExist("ann@example.com/docs/a.txt"); err != nil || pr.Name != "ann@example.com/docs" || len(pr.Above) != 1 {
		t.Fatalf("NotExist below a missing directory: proof of %s, %d above, %v", pr.Name, len(pr.Above), err)
	}
	_, pr = check(ann, "ann@example.com/papers/sub/none", spindle.NotExist, dirlog.EndOtherLeaf, 0)
	if err := pr.VerifyNotExist("ann@example.com/papers/sub/none"); err != nil || len(pr.Above) != 3 {
		t.Fatalf("NotExist in a moved directory: %d above, %v", len(pr.Above), err)
	}
	_, link := check(ann, "ann@example.com/ln/x", spindle.NotDir, dirlog.EndIncluded, 1)
	for what, change := range map[string]func(p *dirlog.Proved){
		"a directory left out": func(p *dirlog.Proved) { p.Above = p.Above[:2] },
		"another name":         func(p *dirlog.Proved) { p.Name = "ann@example.com/papers/sub/other" },
		"a link as directory":  func(p *dirlog.Proved) { p.Above[2] = link },
		"no directories":       func(p *dirlog.Proved) { p.Above = nil },
	} {
		_, pr := check(ann, "ann@example.com/papers/sub/none", spindle.NotExist, dirlog.EndOtherLeaf, 0)
		change(pr)
		wantKind(t, pr.VerifyNotExist("ann@example.com/papers/sub/none"), spindle.Integrity, "NotExist proof with "+what)
	}
	d, pr = check(ann, "ann@example.com/ln/x", spindle.NotDir, dirlog.EndIncluded, 1)
	if d.Name != "ann@example.com/ln" || pr.Name != d.Name {
		t.Fatalf("through a link: entry %s, proof of %s", d.Name, pr.Name)
	}
	// A directory hides nothing: proved whole to a reader who may only
	// list it, with the mkdir and the rename that moved it.
	d, pr = check(cat, "ann@example.com/papers", spindle.Other, dirlog.EndIncluded, 2)
	if d.Attr&spindle.AttrIncomplete == 0 {
		t.Fatal("cat may only list, yet got the whole entry")
	}
	if err := pr.Matches(d); err != nil {
		t.Fatal(err)
	}
	check(cat, "ann@example.com/Access", spindle.Other, dirlog.EndIncluded, 1) // Shown whole.

	_, pr, err := e.s.LookupProved(e.ctx, dan, "ann@example.com/papers/sub/b.txt")
	if !errors.Is(err, spindle.Private) || pr != nil {
		t.Fatalf("dan: proof %v, error %v; want Private and no proof", pr, err)
	}
	_, pr, err = e.s.LookupProved(e.ctx, dan, "ann@example.com/nothing")
	if !errors.Is(err, spindle.Private) || pr != nil {
		t.Fatalf("dan on a missing name: proof %v, error %v; want Private and no proof", pr, err)
	}
}

// TestLookupProvedConcurrent checks that proofs taken while the log grows
// verify against the heads they come with.
func TestLookupProvedConcurrent(t *testing.T) {
	e := newEnv(t, &MemStore{})
	e.setup()
	c := e.as(ann)
	done := make(chan error, 1)
	go func() {
		for i := 0; i < 100; i++ {
			if _, err := c.Put(e.ctx, file(spindle.PathName(fmt.Sprintf("ann@example.com/docs/f%d", i%10)), int64(i+1))); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	proved := 0
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			if proved == 0 {
				t.Fatal("no lookup was proved while the log grew")
			}
			return
		default:
		}
		name := spindle.PathName(fmt.Sprintf("ann@example.com/docs/f%d", proved%10))
		_, pr, err := e.s.LookupProved(e.ctx, ann, name)
		if err != nil && !errors.Is(err, spindle.NotExist) {
			t.Fatal(err)
		}
		if err := pr.Head.Verify(e.host); err != nil {
			t.Fatal(err)
		}
		if err := pr.Verify(); err != nil {
			t.Fatalf("%s at %d: %v", name, pr.Head.Seq, err)
		}
		proved++
	}
}

// TestGlobProved checks that each entry of a Glob comes with a proof that
// verifies against the head, whole for a reader and presence only for a
// user who may only list.
func TestGlobProved(t *testing.T) {
	e := newEnv(t, &MemStore{})
	e.setup()
	c := e.as(ann)
	e.do(c.Put(e.ctx, control("ann@example.com/Access", "*: ann@example.com\nl: cat@example.com\n")))
	for _, tc := range []struct {
		user    spindle.UserName
		whole   bool
		pattern string
		n       int
	}{
		{ann, true, "ann@example.com/docs/*", 2},
		{ann, true, "ann@example.com/*/*", 2},
		{cat, false, "ann@example.com/docs/*", 2},
	} {
		out, prs, h, err := e.s.GlobProved(e.ctx, tc.user, tc.pattern)
		if err != nil || len(out) != tc.n || len(prs) != len(out) {
			t.Fatalf("%s as %s: %d entries, %d proofs, %v", tc.pattern, tc.user, len(out), len(prs), err)
		}
		if err := h.Verify(e.host); err != nil {
			t.Fatal(err)
		}
		for i, pr := range prs {
			pr.Head = h
			if err := pr.Verify(); err != nil || pr.Name != out[i].Name {
				t.Fatalf("%s: proof of %s: %v", out[i].Name, pr.Name, err)
			}
			// Directories and links hide nothing: proved whole to all.
			whole := tc.whole || out[i].Attr.IsDir() || out[i].Attr.IsLink()
			if whole != (len(pr.Entries) > 0) {
				t.Fatalf("%s as %s: %d entries in the proof", out[i].Name, tc.user, len(pr.Entries))
			}
			if whole {
				if err := pr.Matches(out[i]); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if _, prs, _, err := e.s.GlobProved(e.ctx, dan, "ann@example.com/docs/*"); !errors.Is(err, spindle.Private) || prs != nil {
		t.Fatalf("dan: %v, %d proofs", err, len(prs))
	}
	// NotExist comes with the proof a lookup of the path listed gives: of
	// its absence, then of each directory above the first one missing.
	for _, tc := range []struct {
		pattern string
		base    spindle.PathName
		above   int
	}{
		{"ann@example.com/none/*", "ann@example.com/none", 1},
		{"ann@example.com/docs/none", "ann@example.com/docs/none", 2},
		{"ann@example.com/none/x/*/y", "ann@example.com/none/x", 1},
	} {
		out, prs, h, err := e.s.GlobProved(e.ctx, ann, tc.pattern)
		if !errors.Is(err, spindle.NotExist) || out != nil || len(prs) != 1+tc.above || h == nil {
			t.Fatalf("%s: %d entries, %d proofs, head %v, %v", tc.pattern, len(out), len(prs), h, err)
		}
		pr := prs[0]
		pr.Head, pr.Above = h, prs[1:]
		if err := pr.VerifyNotExist(tc.base); err != nil {
			t.Errorf("%s: the proof of %s's absence: %v", tc.pattern, tc.base, err)
		}
		if err := pr.VerifyNotExist("ann@example.com/docs"); err == nil {
			t.Errorf("%s: the proof also proves ann@example.com/docs absent", tc.pattern)
		}
	}
}
