package client

import (
	"errors"
	"io"
	"reflect"
	"testing"

	"spindle.dev"
	"spindle.dev/dirlog"
	"spindle.dev/node/wire"
	"spindle.dev/node/wire/wiretest"
)

// Lies with an older genuine entry at a name, under the genuine proof of
// what is at that name now. The entry is marked AttrIncomplete, as for a
// reader who may not read it, and the proof is cut to what proves the
// name present, so that only matching every entry against the current
// one catches it (see dirproofs.go).

// presenceOnly returns the proof b without the signed entries its value
// is made of: the genuine proof that its name is in the tree.
func presenceOnly(t *testing.T, b []byte) []byte {
	t.Helper()
	pr, err := dirlog.UnmarshalProved(b)
	if err != nil {
		t.Fatal(err)
	}
	pr.Entries = nil
	return pr.Marshal()
}

// asIncomplete returns a copy of e marked incomplete, as a host shows it
// to a reader who may list it but not read it.
func asIncomplete(e *spindle.DirEntry) *spindle.DirEntry {
	c := *e
	c.Blocks, c.Packdata = nil, nil
	c.Attr |= spindle.AttrIncomplete
	return &c
}

// wantNotRead fails the test if c reads anything from name, and wants the
// refusal to be Integrity.
func wantNotRead(t *testing.T, c *Client, name spindle.PathName) {
	t.Helper()
	f, err := c.Open(t.Context(), name)
	if err == nil {
		got, _ := io.ReadAll(f)
		f.Close()
		t.Fatalf("opened %s and read %q", name, got)
	}
	wantIntegrity(t, err, "open "+string(name))
}

// A link the owner pointed elsewhere: the node serves the link's old
// entry, marked incomplete, with the genuine proof that the link's name
// is in the tree. The client must not follow the withdrawn target, at
// the end of a name, above it, or as the second link of a chain.
func TestLieOldLinkMarkedIncomplete(t *testing.T) {
	w := newLieWorld(t)
	w.mkdir(t, "@/pub")
	w.mkdir(t, "@/old")
	w.put(t, "@/pub/a.txt", "current")
	w.put(t, "@/old/a.txt", "withdrawn")
	if _, err := w.ann.PutLink(w.ctx, "@/old/a.txt", "@/docs/link"); err != nil {
		t.Fatal(err)
	}
	if _, err := w.ann.PutLink(w.ctx, "@/old", "@/docs/dirlink"); err != nil {
		t.Fatal(err)
	}
	if _, err := w.ann.PutLink(w.ctx, "@/docs/link", "@/docs/chain"); err != nil {
		t.Fatal(err)
	}
	oldLink := w.entry(t, "@/docs/link")
	oldDirLink := w.entry(t, "@/docs/dirlink")
	for _, name := range []spindle.PathName{"@/docs/link", "@/docs/dirlink"} {
		if err := w.ann.Delete(w.ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.ann.PutLink(w.ctx, "@/pub/a.txt", "@/docs/link"); err != nil {
		t.Fatal(err)
	}
	if _, err := w.ann.PutLink(w.ctx, "@/pub", "@/docs/dirlink"); err != nil {
		t.Fatal(err)
	}
	mustRead(t, w.ann, "@/docs/link", []byte("current"))
	mustRead(t, w.ann, "@/docs/dirlink/a.txt", []byte("current"))
	mustRead(t, w.ann, "@/docs/chain", []byte("current"))
	old := map[spindle.PathName]*spindle.DirEntry{oldLink.Name: oldLink, oldDirLink.Name: oldDirLink}
	for _, tc := range []struct {
		name  string
		proof func(t *testing.T, b []byte) []byte
	}{
		{"proof of presence", presenceOnly},
		{"whole proof", func(_ *testing.T, b []byte) []byte { return b }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w.lie(func(req *wiretest.Request, resp *wiretest.Response) {
				if req.Method != wire.DirLookup || resp.Entry == nil || old[resp.Entry.Name] == nil || len(resp.DirProofs) != 1 {
					return
				}
				resp.Entry = asIncomplete(old[resp.Entry.Name])
				resp.DirProofs[0] = tc.proof(t, resp.DirProofs[0])
			})
			defer w.l.tell(nil)
			for _, name := range []spindle.PathName{"@/docs/link", "@/docs/dirlink/a.txt", "@/docs/chain"} {
				wantNotRead(t, w.ann, name)
			}
		})
	}
}

// A link the owner replaced by a directory: the node serves the link's
// entry, marked incomplete, with the genuine proof that the name (now the
// directory's) is in the tree, for the name itself and for a name below
// it.
func TestLieLinkReplacedByDirectory(t *testing.T) {
	w := newLieWorld(t)
	w.mkdir(t, "@/old")
	w.put(t, "@/old/a.txt", "withdrawn")
	if _, err := w.ann.PutLink(w.ctx, "@/old", "@/docs/sub"); err != nil {
		t.Fatal(err)
	}
	link := w.entry(t, "@/docs/sub")
	if err := w.ann.Delete(w.ctx, "@/docs/sub"); err != nil {
		t.Fatal(err)
	}
	w.mkdir(t, "@/docs/sub")
	w.put(t, "@/docs/sub/a.txt", "current")
	mustRead(t, w.ann, "@/docs/sub/a.txt", []byte("current"))
	// The genuine proof that docs/sub is in the tree, as an honest node
	// answers a lookup of the directory.
	var dir wiretest.Response
	w.l.tell(func(req *wiretest.Request, resp *wiretest.Response) {
		if req.Method == wire.DirLookup && req.Name == link.Name {
			dir = *resp
		}
	})
	if e := w.entry(t, "@/docs/sub"); !e.Attr.IsDir() || dir.Head == nil || len(dir.DirProofs) != 1 {
		t.Fatalf("honest lookup of the directory: %v, head %v, %d proofs", e.Attr, dir.Head, len(dir.DirProofs))
	}
	notDir := wire.ErrBytes(spindle.E(spindle.NotDir, link.Name))
	for _, tc := range []struct {
		name  string
		proof func(t *testing.T, b []byte) []byte
	}{
		{"proof of presence", presenceOnly},
		{"whole proof", func(_ *testing.T, b []byte) []byte { return b }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w.lie(func(req *wiretest.Request, resp *wiretest.Response) {
				if req.Method != wire.DirLookup || req.Name != link.Name && req.Name != link.Name+"/a.txt" {
					return
				}
				*resp = wiretest.Response{Entry: asIncomplete(link), Head: dir.Head, DirProofs: [][]byte{tc.proof(t, dir.DirProofs[0])}}
				if req.Name != link.Name {
					resp.Err = notDir // The link met on the way.
				}
			})
			defer w.l.tell(nil)
			wantNotRead(t, w.ann, "@/docs/sub/a.txt")
			e, err := w.ann.Lookup(w.ctx, "@/docs/sub", false)
			if err == nil {
				t.Fatalf("lookup of the directory: a %v to %s", e.Attr, e.Link)
			}
			wantIntegrity(t, err, "lookup")
		})
	}
}

// A Glob lists a link's old entry, marked incomplete, with the genuine
// proof that its name is in the tree.
func TestLieGlobOldLinkMarkedIncomplete(t *testing.T) {
	w := newLieWorld(t)
	if _, err := w.ann.PutLink(w.ctx, "@/docs/a.txt", "@/docs/link"); err != nil {
		t.Fatal(err)
	}
	old := w.entry(t, "@/docs/link")
	if err := w.ann.Delete(w.ctx, "@/docs/link"); err != nil {
		t.Fatal(err)
	}
	if _, err := w.ann.PutLink(w.ctx, "@/docs/b.txt", "@/docs/link"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		proof func(t *testing.T, b []byte) []byte
	}{
		{"proof of presence", presenceOnly},
		{"whole proof", func(_ *testing.T, b []byte) []byte { return b }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w.lie(func(req *wiretest.Request, resp *wiretest.Response) {
				if req.Method != wire.DirGlob || len(resp.Entries) != len(resp.DirProofs) {
					return
				}
				for i, e := range resp.Entries {
					if e.Name == old.Name {
						resp.Entries[i] = asIncomplete(old)
						resp.DirProofs[i] = tc.proof(t, resp.DirProofs[i])
					}
				}
			})
			defer w.l.tell(nil)
			es, err := w.ann.Glob(w.ctx, "@/docs/*")
			for _, e := range es {
				if e.Name == old.Name {
					t.Fatalf("glob listed the link to %s", e.Link)
				}
			}
			wantIntegrity(t, err, "glob")
		})
	}
}

// An honest node's answers to a reader who may list but not read pass
// the match: a directory and a link are proved whole and matched, and of
// a file only the name is kept, the rest being unproved.
func TestHonestListOnlyReaderMatched(t *testing.T) {
	w := newLieWorld(t)
	carol := dialAs(t, w.n, "carol@example.com")
	w.mkdir(t, "@/list")
	w.mkdir(t, "@/list/sub")
	w.put(t, "@/list/Access", "list: carol@example.com\n*: ann@example.com\n")
	w.put(t, "@/list/f.txt", "secret")
	if _, err := w.ann.PutLink(w.ctx, "@/list/sub", "@/list/link"); err != nil {
		t.Fatal(err)
	}
	es, err := carol.Glob(w.ctx, "ann@example.com/list/*")
	if err != nil || len(es) != 4 {
		t.Fatalf("glob: %d entries, %v", len(es), err)
	}
	for _, e := range es {
		if e.Name == "ann@example.com/list/Access" {
			continue
		}
		if !e.Attr.IsIncomplete() {
			t.Errorf("%s: whole to a reader who may only list", e.Name)
		}
	}
	f, err := carol.Lookup(w.ctx, "ann@example.com/list/f.txt", false)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(f, &spindle.DirEntry{Name: "ann@example.com/list/f.txt", Attr: spindle.AttrIncomplete}) {
		t.Errorf("a file carol may not read: %+v, want its name alone", f)
	}
	l, err := carol.Lookup(w.ctx, "ann@example.com/list/link", false)
	if err != nil || !l.Attr.IsLink() || l.Link != "ann@example.com/list/sub" {
		t.Fatalf("link: %+v, %v", l, err)
	}
	d, err := carol.Lookup(w.ctx, "ann@example.com/list/link", true)
	if err != nil || !d.Attr.IsDir() || d.Name != "ann@example.com/list/sub" {
		t.Fatalf("through the link: %+v, %v", d, err)
	}
}

// The node answers a Glob with NotExist for a directory that exists
// (found by FuzzClientAgainstLiar): without a proof (as a node older than
// the proof does), or with the genuine proof of another path's absence.
// A Glob's NotExist carries the proof a Lookup of the path listed gives;
// without one the client looks the path up, and asks the Glob again once
// when the lookup finds it.
func TestLieGlobNotExist(t *testing.T) {
	w := newLieWorld(t)
	var absent wiretest.Response
	w.l.tell(func(req *wiretest.Request, resp *wiretest.Response) {
		if req.Method == wire.DirGlob && req.Pattern == "ann@example.com/none/*" {
			absent = *resp
		}
		if req.Method == wire.DirLookup {
			t.Errorf("honest glob proved NotExist with a lookup of %s", req.Name)
		}
	})
	if _, err := w.ann.Glob(w.ctx, "ann@example.com/none/*"); !errors.Is(err, spindle.NotExist) || absent.Head == nil || len(absent.DirProofs) == 0 {
		t.Fatalf("honest glob of a missing directory: %v, head %v, %d proofs", err, absent.Head, len(absent.DirProofs))
	}
	w.l.tell(nil)
	for _, pattern := range []string{"ann@example.com/docs/*", "ann@example.com/docs/a.txt"} {
		t.Run("another path's absence "+pattern, func(t *testing.T) {
			w.lie(func(req *wiretest.Request, resp *wiretest.Response) {
				if req.Method == wire.DirGlob {
					*resp = absent
					resp.Err = wire.ErrBytes(spindle.E(spindle.NotExist, spindle.PathName(req.Pattern)))
				}
			})
			defer w.l.tell(nil)
			_, err := w.ann.Glob(w.ctx, pattern)
			wantIntegrity(t, err, "glob")
		})
	}
	// The tree grew between a Glob answered without proof and the lookup:
	// the Glob asked again is believed.
	t.Run("raced", func(t *testing.T) {
		globs := 0
		w.lie(func(req *wiretest.Request, resp *wiretest.Response) {
			if req.Method == wire.DirGlob {
				if globs++; globs == 1 {
					*resp = wiretest.Response{Err: wire.ErrBytes(spindle.E(spindle.NotExist, spindle.PathName(req.Pattern)))}
				}
			}
		})
		defer w.l.tell(nil)
		des, err := w.ann.Glob(w.ctx, "ann@example.com/docs/*")
		if err != nil || len(des) == 0 || globs != 2 {
			t.Errorf("glob answered NotExist once, then honestly: %d entries, %v, after %d globs", len(des), err, globs)
		}
	})
	for _, pattern := range []string{"ann@example.com/docs/*", "ann@example.com/docs/a.txt", "ann@example.com/docs/*/x"} {
		t.Run(pattern, func(t *testing.T) {
			w.lie(func(req *wiretest.Request, resp *wiretest.Response) {
				if req.Method == wire.DirGlob {
					*resp = wiretest.Response{Err: wire.ErrBytes(spindle.E(spindle.NotExist, spindle.PathName(req.Pattern)))}
				}
			})
			defer w.l.tell(nil)
			_, err := w.ann.Glob(w.ctx, pattern)
			wantIntegrity(t, err, "glob")
		})
	}
	for _, pattern := range []string{"ann@example.com/none/*", "ann@example.com/docs/none", "ann@example.com/none/x/*"} {
		if _, err := w.ann.Glob(w.ctx, pattern); !errors.Is(err, spindle.NotExist) {
			t.Errorf("honest glob %s: %v, want NotExist", pattern, err)
		}
	}
}
