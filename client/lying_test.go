package client

import (
	"bytes"
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/libp2p/go-libp2p/core/peer"

	"spindle.dev"
	"spindle.dev/node"
	"spindle.dev/node/wire"
	"spindle.dev/node/wire/wiretest"
	"spindle.dev/p2p"
	"spindle.dev/pack"
)

// The lying-node harness: a real node whose request handler is wrapped so
// that a test can rewrite its answers, as the peer a client talks through
// could (see the threat model in shared/DESIGN.md). Each test tells one
// lie and checks that the client catches it with an Integrity error and
// that no file key is wrapped for a user the true Access file does not
// name.

// A liar is a node that answers as a test tells it to.
type liar struct {
	n  *node.Node
	mu sync.Mutex
	fn func(req *wiretest.Request, resp *wiretest.Response) // Nil: answer honestly.
}

// newLiar re-registers n's client protocol handler with one that passes
// every answer of n through the lie set with tell.
func newLiar(t testing.TB, n *node.Node) *liar {
	t.Helper()
	l := &liar{n: n}
	p2p.Handle(context.Background(), n.Host(), wire.ClientProtocol, wire.MaxMessage, func(ctx context.Context, remote peer.ID, data []byte) ([]byte, error) {
		out, err := n.ServeClient(ctx, remote, data)
		l.mu.Lock()
		fn := l.fn
		l.mu.Unlock()
		if err != nil || fn == nil {
			return out, err
		}
		var req wiretest.Request
		var resp wiretest.Response
		if wire.Decode(data, &req) != nil || wire.Decode(out, &resp) != nil {
			return out, err
		}
		fn(&req, &resp)
		return wire.Encode(&resp)
	})
	return l
}

// tell makes the node tell the lie fn from now on; nil makes it honest.
func (l *liar) tell(fn func(req *wiretest.Request, resp *wiretest.Response)) {
	l.mu.Lock()
	l.fn = fn
	l.mu.Unlock()
}

// lieWorld is a node with ann, bob and mallory signed up. Ann's docs
// directory may be read by bob and by the members of her group friends
// (bob), and holds a.txt and b.txt.
type lieWorld struct {
	ctx          context.Context
	n            *node.Node
	l            *liar
	ann, mallory *Client
}

// docsAccess is the true Access file of ann's docs.
const docsAccess = "read: bob@example.com, friends\n*: ann@example.com\n"

func newLieWorld(t testing.TB) *lieWorld {
	t.Helper()
	n := startNode(t, t.TempDir())
	t.Cleanup(func() { n.Close() })
	w := &lieWorld{ctx: context.Background(), n: n}
	w.ann = dialAs(t, n, "ann@example.com")
	dialAs(t, n, "bob@example.com")
	w.mallory = dialAs(t, n, "mallory@evil.example")
	w.l = newLiar(t, n)
	w.mkdir(t, "@/docs")
	w.mkdir(t, "@/Group")
	w.put(t, "@/Group/friends", "bob@example.com\n")
	w.put(t, "@/docs/Access", docsAccess)
	w.put(t, "@/docs/a.txt", "the contract, final")
	w.put(t, "@/docs/b.txt", "the contract, old draft")
	return w
}

func (w *lieWorld) mkdir(t testing.TB, name spindle.PathName) {
	t.Helper()
	if _, err := w.ann.MakeDirectory(w.ctx, name); err != nil {
		t.Fatal(err)
	}
}

func (w *lieWorld) put(t testing.TB, name spindle.PathName, text string) {
	t.Helper()
	if _, err := w.ann.Put(w.ctx, name, strings.NewReader(text), 0, nil); err != nil {
		if _, ok := err.(*spindle.Warning); !ok {
			t.Fatal(err)
		}
	}
}

// lie makes the node tell the lie fn to ann from now on, and makes ann's
// client forget the readers it worked out before, so that its next put
// asks the node (a lie told after that is believed, or caught, once
// readersTTL has passed).
func (w *lieWorld) lie(fn func(req *wiretest.Request, resp *wiretest.Response)) {
	w.ann.forgetReaders()
	w.l.tell(fn)
}

// entry looks name up honestly.
func (w *lieWorld) entry(t testing.TB, name spindle.PathName) *spindle.DirEntry {
	t.Helper()
	e, err := w.ann.Lookup(w.ctx, name, false)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// wantIntegrity fails the test unless err is an Integrity error.
func wantIntegrity(t *testing.T, err error, what string) {
	t.Helper()
	if !errors.Is(err, spindle.Integrity) {
		t.Fatalf("%s: got %v, want an Integrity error", what, err)
	}
	t.Logf("%s: %v", what, err)
}

// noKeyForMallory checks, with the node honest again, that no file in
// ann's docs has its key wrapped for mallory, and that name was not put.
func (w *lieWorld) noKeyForMallory(t *testing.T, name spindle.PathName) {
	t.Helper()
	w.l.tell(nil)
	if _, err := w.ann.Lookup(w.ctx, name, false); !errors.Is(err, spindle.NotExist) {
		t.Errorf("%s after the lie: %v, want NotExist", name, err)
	}
	mk, err := spindle.KeyHash(w.mallory.keys.PublicKey())
	if err != nil {
		t.Fatal(err)
	}
	es, err := w.ann.Glob(w.ctx, "@/docs/*")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		if e.Packing != spindle.EEPack {
			continue
		}
		hs, err := pack.WrappedKeys(e)
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range hs {
			if h == mk {
				t.Errorf("%s: file key wrapped for mallory", e.Name)
			}
		}
	}
}

// The node adds mallory to the readers in the Access file it answers
// WhichAccess with, or answers with another Access file of ann's.
func TestLieExtraReaderInWhichAccess(t *testing.T) {
	w := newLieWorld(t)
	w.mkdir(t, "@/open")
	w.put(t, "@/open/Access", "read: mallory@evil.example\n")
	open := w.entry(t, "@/open/Access")
	for _, tc := range []struct {
		name string
		lie  func(e *spindle.DirEntry)
	}{
		{"text", func(e *spindle.DirEntry) {
			e.Inline = []byte("read: bob@example.com, friends, mallory@evil.example\n*: ann@example.com\n")
			e.Size = int64(len(e.Inline))
		}},
		{"another Access file", func(e *spindle.DirEntry) { *e = *open }},
		{"another Access file renamed", func(e *spindle.DirEntry) {
			name := e.Name
			*e = *open
			e.Name = name
		}},
		{"another Access file with a signed name", func(e *spindle.DirEntry) {
			name := e.Name
			*e = *open
			e.Name, e.SignedName = name, open.Name
		}},
		{"no signed entry", func(e *spindle.DirEntry) { e.Signed = nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w.lie(func(req *wiretest.Request, resp *wiretest.Response) {
				if req.Method == wire.DirWhich && resp.Entry != nil {
					tc.lie(resp.Entry)
				}
			})
			_, err := w.ann.Put(w.ctx, "@/docs/new.txt", strings.NewReader("for bob"), 0, nil)
			wantIntegrity(t, err, "put")
			reps, err := w.ann.Share(w.ctx, "@/docs/a.txt", false, true)
			if err != nil || len(reps) != 1 {
				t.Fatalf("share -fix: %v, %d reports", err, len(reps))
			}
			wantIntegrity(t, reps[0].Err, "share -fix")
			w.noKeyForMallory(t, "@/docs/new.txt")
		})
	}
}

// The node adds mallory to a group the Access file names.
func TestLieGroupExtraMember(t *testing.T) {
	w := newLieWorld(t)
	w.lie(func(req *wiretest.Request, resp *wiretest.Response) {
		if req.Method == wire.DirLookup && req.Name == "ann@example.com/Group/friends" && resp.Entry != nil {
			resp.Entry.Inline = append(resp.Entry.Inline, "mallory@evil.example\n"...)
			resp.Entry.Size = int64(len(resp.Entry.Inline))
		}
	})
	_, err := w.ann.Put(w.ctx, "@/docs/new.txt", strings.NewReader("for friends"), 0, nil)
	wantIntegrity(t, err, "put")
	w.noKeyForMallory(t, "@/docs/new.txt")
}

// The node lists a user of another domain among the users of a domain an
// Access file grants read to.
func TestLieWildcardForeignUser(t *testing.T) {
	w := newLieWorld(t)
	w.put(t, "@/docs/Access", "read: *@example.com\n*: ann@example.com\n")
	w.lie(func(req *wiretest.Request, resp *wiretest.Response) {
		if req.Method == wire.KeyDomain {
			resp.Users = append(resp.Users, "mallory@evil.example")
		}
	})
	_, err := w.ann.Put(w.ctx, "@/docs/new.txt", strings.NewReader("for example.com"), 0, nil)
	wantIntegrity(t, err, "put")
	w.noKeyForMallory(t, "@/docs/new.txt")
}

// The node answers a lookup of a.txt with b.txt's entry, a genuine one
// signed by ann: as it is, renamed, or as if a rename had moved it.
func TestLieEntryUnderAnotherName(t *testing.T) {
	w := newLieWorld(t)
	w.mkdir(t, "@/x")
	w.put(t, "@/x/old.txt", "moved")
	if err := w.ann.Rename(w.ctx, "@/x/old.txt", "@/x/new.txt"); err != nil {
		t.Fatal(err)
	}
	moved := w.entry(t, "@/x/new.txt")
	if len(moved.Signed) != 1 {
		t.Fatalf("a moved entry carries %d signed records, want its rename", len(moved.Signed))
	}
	mustRead(t, w.ann, "@/x/new.txt", []byte("moved"))
	b := w.entry(t, "@/docs/b.txt")
	for _, tc := range []struct {
		name string
		lie  func(e *spindle.DirEntry)
	}{
		{"as it is", func(e *spindle.DirEntry) { *e = *b }},
		{"renamed", func(e *spindle.DirEntry) { name := e.Name; *e = *b; e.Name = name }},
		{"signed name", func(e *spindle.DirEntry) {
			name := e.Name
			*e = *b
			e.Name, e.SignedName = name, b.Name
		}},
		{"another rename's record", func(e *spindle.DirEntry) {
			name := e.Name
			*e = *b
			e.Name, e.SignedName, e.Signed = name, b.Name, moved.Signed
		}},
		{"a moved entry", func(e *spindle.DirEntry) { name := e.Name; *e = *moved; e.Name = name }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w.lie(func(req *wiretest.Request, resp *wiretest.Response) {
				if req.Method == wire.DirLookup && req.Name == "ann@example.com/docs/a.txt" && resp.Entry != nil {
					tc.lie(resp.Entry)
				}
			})
			defer w.l.tell(nil)
			f, err := w.ann.Open(w.ctx, "@/docs/a.txt")
			if err == nil {
				got, _ := io.ReadAll(f)
				f.Close()
				t.Fatalf("opened a.txt and read %q", got)
			}
			wantIntegrity(t, err, "open")
		})
	}
}

// The node serves inline text of its own: for a file, and for an Access
// file.
func TestLieForgedInlineText(t *testing.T) {
	w := newLieWorld(t)
	for _, name := range []spindle.PathName{"ann@example.com/docs/a.txt", "ann@example.com/docs/Access"} {
		t.Run(string(name), func(t *testing.T) {
			w.lie(func(req *wiretest.Request, resp *wiretest.Response) {
				if req.Method == wire.DirLookup && req.Name == name && resp.Entry != nil {
					resp.Entry.Inline = []byte("pay mallory\n")
					resp.Entry.Blocks, resp.Entry.Size = nil, int64(len(resp.Entry.Inline))
				}
			})
			defer w.l.tell(nil)
			f, err := w.ann.Open(w.ctx, name)
			if err == nil {
				got, _ := io.ReadAll(f)
				f.Close()
				t.Fatalf("opened %s and read %q", name, got)
			}
			wantIntegrity(t, err, "open")
		})
	}
	mustRead(t, w.ann, "@/docs/Access", []byte(docsAccess))
}

// The node answers WhichAccess with the Access file as it was before the
// owner took a reader out: a genuine entry, signed by the owner at that
// name. Only a proof against a signed head that it is the current one can
// catch this.
func TestLieOlderAccessFile(t *testing.T) {
	w := newLieWorld(t)
	w.put(t, "@/docs/Access", "read: bob@example.com, mallory@evil.example\n")
	old := w.entry(t, "@/docs/Access")
	w.put(t, "@/docs/Access", "read: bob@example.com\n")
	w.lie(func(req *wiretest.Request, resp *wiretest.Response) {
		if req.Method == wire.DirWhich && resp.Entry != nil {
			*resp.Entry = *old
		}
	})
	_, err := w.ann.Put(w.ctx, "@/docs/new.txt", bytes.NewReader([]byte("for bob")), 0, nil)
	wantIntegrity(t, err, "put")
	w.noKeyForMallory(t, "@/docs/new.txt")
}

// An honest node's answers pass every check after renames: files, Access
// and Group files and links moved once or twice, alone or with their
// directory, are read, govern and are re-shared at their new names.
func TestHonestMovesVerify(t *testing.T) {
	w := newLieWorld(t)
	if _, err := w.ann.PutLink(w.ctx, "@/docs/a.txt", "@/docs/link"); err != nil {
		t.Fatal(err)
	}
	if err := w.ann.Rename(w.ctx, "@/docs", "@/papers"); err != nil {
		t.Fatal(err)
	}
	if err := w.ann.Rename(w.ctx, "@/papers/b.txt", "@/papers/b2.txt"); err != nil {
		t.Fatal(err)
	}
	if err := w.ann.Rename(w.ctx, "@/papers", "@/final"); err != nil {
		t.Fatal(err)
	}
	for _, name := range []spindle.PathName{"@/final/a.txt", "@/final/b2.txt", "@/final/Access", "@/final/link"} {
		if e := w.entry(t, name); len(e.Signed) == 0 {
			t.Errorf("%s: moved, with no signed records", name)
		}
	}
	mustRead(t, w.ann, "@/final/b2.txt", []byte("the contract, old draft"))
	mustRead(t, w.ann, "@/final/Access", []byte(docsAccess))
	// The link still names its old target; a new one through it.
	if _, err := w.ann.PutLink(w.ctx, "@/final/a.txt", "@/final/link2"); err != nil {
		t.Fatal(err)
	}
	mustRead(t, w.ann, "@/final/link2", []byte("the contract, final"))
	// The moved Access file governs puts and re-sharing.
	w.put(t, "@/final/new.txt", "for bob")
	readers, err := w.ann.Readers(w.ctx, "@/final/new.txt")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(readers, "bob@example.com") {
		t.Errorf("readers of a file under a moved Access file: %v", readers)
	}
	w.put(t, "@/final/Access", "read: bob@example.com, friends, carol@example.com\n*: ann@example.com\n")
	dialAs(t, w.n, "carol@example.com")
	reps, err := w.ann.Share(w.ctx, "@/final", true, true)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range reps {
		if r.Err != nil {
			t.Errorf("share -fix %s: %v", r.Name, r.Err)
		}
	}
	// The re-shared moved file is signed at its new name again.
	if e := w.entry(t, "@/final/b2.txt"); e.SignedName != "" || len(e.Signed) != 0 {
		t.Errorf("re-shared moved file: signed name %q, %d records", e.SignedName, len(e.Signed))
	}
	mustRead(t, w.ann, "@/final/b2.txt", []byte("the contract, old draft"))
	// A moved Group file grants at its new name.
	if err := w.ann.Rename(w.ctx, "@/Group/friends", "@/Group/pals"); err != nil {
		t.Fatal(err)
	}
	w.put(t, "@/final/Access", "read: pals\n*: ann@example.com\n")
	readers, err = w.ann.Readers(w.ctx, "@/final/a.txt")
	if err != nil || !slices.Contains(readers, "bob@example.com") {
		t.Fatalf("readers through a moved group: %v, %v", readers, err)
	}
}

// The node changes the target of a link, one the client follows to the
// end and one it meets above the name it asked for.
func TestLieLinkTarget(t *testing.T) {
	w := newLieWorld(t)
	w.mkdir(t, "@/pub")
	w.put(t, "@/pub/a.txt", "public")
	if _, err := w.ann.PutLink(w.ctx, "@/pub/a.txt", "@/docs/link"); err != nil {
		t.Fatal(err)
	}
	if _, err := w.ann.PutLink(w.ctx, "@/pub", "@/docs/dirlink"); err != nil {
		t.Fatal(err)
	}
	mustRead(t, w.ann, "@/docs/link", []byte("public"))
	mustRead(t, w.ann, "@/docs/dirlink/a.txt", []byte("public"))
	w.lie(func(req *wiretest.Request, resp *wiretest.Response) {
		if req.Method == wire.DirLookup && resp.Entry != nil && resp.Entry.Attr.IsLink() {
			resp.Entry.Link = spindle.PathName(strings.Replace(string(resp.Entry.Link), "/pub", "/docs", 1))
		}
	})
	for _, name := range []spindle.PathName{"@/docs/link", "@/docs/dirlink/a.txt"} {
		_, err := w.ann.Open(w.ctx, name)
		wantIntegrity(t, err, "open "+string(name))
	}
}

// The node answers WhichAccess with a genuine Access file farther up than
// the one that governs the name, hiding the nearer one. Only a proof that
// no Access file lies between them can catch this.
func TestLieFartherAccessFile(t *testing.T) {
	w := newLieWorld(t)
	w.put(t, "@/Access", "read: mallory@evil.example\n*: ann@example.com\n")
	root := w.entry(t, "@/Access")
	w.lie(func(req *wiretest.Request, resp *wiretest.Response) {
		if req.Method == wire.DirWhich && resp.Entry != nil {
			*resp.Entry = *root
		}
	})
	_, err := w.ann.Put(w.ctx, "@/docs/new.txt", strings.NewReader("for bob"), 0, nil)
	wantIntegrity(t, err, "put")
	w.noKeyForMallory(t, "@/docs/new.txt")
}

func TestUnder(t *testing.T) {
	for _, tc := range []struct {
		name, dir spindle.PathName
		rest      string
		ok        bool
	}{
		{"ann@example.com/a/b", "ann@example.com/a", "/b", true},
		{"ann@example.com/a", "ann@example.com/a", "", true},
		{"ann@example.com/ab", "ann@example.com/a", "", false},
		{"ann@example.com/a", "ann@example.com/a/b", "", false},
		{"ann@example.com/a", "ann@example.com/", "", false},
	} {
		if rest, ok := under(tc.name, tc.dir); rest != tc.rest || ok != tc.ok {
			t.Errorf("under(%s, %s) = %q, %v; want %q, %v", tc.name, tc.dir, rest, ok, tc.rest, tc.ok)
		}
	}
}
