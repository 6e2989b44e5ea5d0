package node

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"spindle.dev"
	"spindle.dev/dirlog"
	"spindle.dev/node/wire"
	"spindle.dev/node/wire/wiretest"
)

// badNames are elements no new name may hold, and why.
var badNames = []struct{ what, elem string }{
	{"escape sequence", "a\x1b[2Jb"},
	{"newline", "two\nlines"},
	{"carriage return", "fake\rline"},
	{"DEL", "del\x7f"},
	{"C1 control", "csi\u009b2J"},
	{"line separator", "ls\u2028x"},
	{"invalid UTF-8", "bad\xffname"},
}

// The real client refuses a bad new name before anything is stored, with
// an Invalid error, for every operation that makes a name.
func TestClientRefusesBadNames(t *testing.T) {
	n := startNode(t, t.TempDir())
	defer n.Close()
	c := dialAs(t, n, "ann@example.com")
	ctx := context.Background()
	if _, err := c.MakeDirectory(ctx, "@/docs"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, "@/docs/a", strings.NewReader("a"), 0, nil); err != nil {
		t.Fatal(err)
	}
	for _, tc := range badNames {
		bad := spindle.PathName("@/docs/" + tc.elem)
		for _, op := range []struct {
			name string
			do   func() error
		}{
			{"put", func() error { _, err := c.Put(ctx, bad, strings.NewReader("x"), 0, nil); return err }},
			{"mkdir", func() error { _, err := c.MakeDirectory(ctx, bad); return err }},
			{"link name", func() error { _, err := c.PutLink(ctx, "@/docs/a", bad); return err }},
			{"link target", func() error { _, err := c.PutLink(ctx, bad, "@/docs/ln"); return err }},
			{"rename destination", func() error { return c.Rename(ctx, "@/docs/a", bad) }},
		} {
			err := op.do()
			if !errors.Is(err, spindle.Invalid) || !strings.Contains(err.Error(), "element") {
				t.Errorf("%s: %s: %v, want an Invalid error naming the element", tc.what, op.name, err)
			}
		}
		// (A name that is not UTF-8 cannot even be asked for: the protocol
		// carries names as CBOR text.)
		if _, err := c.Lookup(ctx, bad, false); !errors.Is(err, spindle.NotExist) && !errors.Is(err, spindle.Invalid) {
			t.Errorf("%s: after refusals: lookup: %v, want NotExist", tc.what, err)
		}
	}
	es, err := c.Glob(ctx, "ann@example.com/docs/*")
	if err != nil || len(es) != 1 || es[0].Name != ann("docs/a") {
		t.Fatalf("docs after refusals: %v %v, want only docs/a", es, err)
	}
}

// A name that ends in a slash (or ".", or is a root) names a directory:
// put and link refuse it at the client, and make nothing.
func TestPutDirectoryPath(t *testing.T) {
	n := startNode(t, t.TempDir())
	defer n.Close()
	c := dialAs(t, n, "ann@example.com")
	ctx := context.Background()
	if _, err := c.MakeDirectory(ctx, "@/dir"); err != nil {
		t.Fatal(err)
	}
	for _, name := range []spindle.PathName{"@/dir/w/", "@/dir/w//", "@/dir/w/.", "@/dir/w/x/..", "@", "@/", "ann@example.com/dir/w/"} {
		_, err := c.Put(ctx, name, strings.NewReader("x"), 0, nil)
		if !errors.Is(err, spindle.Invalid) || !strings.Contains(err.Error(), "directory path given for a file") {
			t.Errorf("put %s: %v, want Invalid naming a directory path", name, err)
		}
		_, err = c.PutLink(ctx, "@/dir", name)
		if !errors.Is(err, spindle.Invalid) {
			t.Errorf("link %s: %v, want Invalid", name, err)
		}
	}
	if _, err := c.Lookup(ctx, "@/dir/w", false); !errors.Is(err, spindle.NotExist) {
		t.Errorf("a put to dir/w/ made dir/w: %v", err)
	}
	// mkdir takes a trailing slash as it always did.
	if _, err := c.MakeDirectory(ctx, "@/dir/sub/"); err != nil {
		t.Errorf("mkdir with a trailing slash: %v", err)
	}
}

// Names are in NFC: the client converts what it is given, so "café" in
// NFC and NFD name one file, found by either spelling.
func TestNamesNFC(t *testing.T) {
	n := startNode(t, t.TempDir())
	defer n.Close()
	c := dialAs(t, n, "ann@example.com")
	ctx := context.Background()
	const nfc, nfd = "@/caf\u00e9", "@/cafe\u0301"
	if _, err := c.Put(ctx, nfd, strings.NewReader("one"), 0, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, nfc, strings.NewReader("two"), 0, nil); err != nil {
		t.Fatal(err)
	}
	es, err := c.Glob(ctx, "ann@example.com/*")
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 1 || es[0].Name != ann("caf\u00e9") {
		t.Fatalf("root holds %d entries (%v), want one, ann@example.com/café in NFC", len(es), es)
	}
	mustRead(t, c, nfd, []byte("two"))
	mustRead(t, c, nfc, []byte("two"))
	if es, err := c.Glob(ctx, "@/cafe\u0301*"); err != nil || len(es) != 1 {
		t.Errorf("glob in NFD: %v, %v; want the one file", es, err)
	}
	// A directory in NFD, and a rename to an NFD name, land in NFC too.
	if _, err := c.MakeDirectory(ctx, "@/re\u0301sume\u0301s"); err != nil {
		t.Fatal(err)
	}
	if err := c.Rename(ctx, nfc, "@/r\u00e9sum\u00e9s/nai\u0308ve"); err != nil {
		t.Fatal(err)
	}
	mustRead(t, c, "@/r\u00e9sum\u00e9s/na\u00efve", []byte("two"))
}

// The node refuses bad names from a client that skips the client's checks:
// entries signed by the real user and sent through the client protocol.
func TestNodeRefusesBadNames(t *testing.T) {
	n := startNode(t, t.TempDir())
	defer n.Close()
	c, keys := dialWithKeys(t, n, "ann@example.com")
	rc := dialRaw(t, n, keys)
	ctx := context.Background()
	if _, err := c.MakeDirectory(ctx, "@/docs"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, "@/docs/a", strings.NewReader("a"), 0, nil); err != nil {
		t.Fatal(err)
	}
	// raw signs an entry for the next place in ann's log, with none of the
	// client's checks, and sends it to the node as dir.append, and as a
	// batch of one.
	raw := func(op dirlog.Operation, d spindle.DirEntry, newName spindle.PathName) (error, error) {
		resp, err := rc.call(&wiretest.Request{Method: wire.DirHead, User: "ann@example.com"})
		if err != nil {
			t.Fatal(err)
		}
		h := resp.Head
		e := &dirlog.Entry{Seq: h.Seq + 1, Prev: h.Hash, Time: spindle.Now(), Op: op, Entry: d, NewName: newName, KeyAt: n.keyLogSize()}
		e.Entry.Sequence = e.Seq
		if op != dirlog.OpRename {
			e.Entry.Time = e.Time
		}
		if err := e.Sign(keys); err != nil {
			t.Fatal(err)
		}
		_, one := rc.call(&wiretest.Request{Method: wire.DirAppend, Data: e.Marshal()})
		_, batch := rc.call(&wiretest.Request{Method: wire.DirBatch, Batch: [][]byte{e.Marshal()}})
		return one, batch
	}
	dir := "ann@example.com/docs/"
	link := func(name, target string) spindle.DirEntry {
		return spindle.DirEntry{Name: spindle.PathName(name), Attr: spindle.AttrLink, Link: spindle.PathName(target)}
	}
	type rawCase struct {
		what    string
		op      dirlog.Operation
		d       spindle.DirEntry
		newName spindle.PathName
		say     string // What the error must mention.
	}
	var cases []rawCase
	for _, b := range badNames {
		cases = append(cases,
			rawCase{b.what + " in a mkdir", dirlog.OpMkdir, spindle.DirEntry{Name: spindle.PathName(dir + b.elem), Attr: spindle.AttrDirectory}, "", "element"},
			rawCase{b.what + " in a link target", dirlog.OpLink, link(dir+"ln", dir+b.elem), "", "element"},
			rawCase{b.what + " in a rename destination", dirlog.OpRename, spindle.DirEntry{Name: spindle.PathName(dir + "a")}, spindle.PathName(dir + b.elem), "element"},
		)
	}
	cases = append(cases,
		rawCase{"NFD name", dirlog.OpMkdir, spindle.DirEntry{Name: spindle.PathName(dir + "cafe\u0301"), Attr: spindle.AttrDirectory}, "", "normalization form C"},
		rawCase{"NFD link target", dirlog.OpLink, link(dir+"ln", dir+"cafe\u0301"), "", "normalization form C"},
		rawCase{"NFD rename destination", dirlog.OpRename, spindle.DirEntry{Name: spindle.PathName(dir + "a")}, spindle.PathName(dir + "cafe\u0301"), "normalization form C"},
		rawCase{"trailing slash", dirlog.OpMkdir, spindle.DirEntry{Name: spindle.PathName(dir + "w/"), Attr: spindle.AttrDirectory}, "", "not clean"},
		rawCase{"trailing slash on a link", dirlog.OpLink, link(dir+"w/", dir+"a"), "", "not clean"},
	)
	before, err := c.Glob(ctx, "ann@example.com/docs/*")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range cases {
		one, batch := raw(tc.op, tc.d, tc.newName)
		for _, err := range []error{one, batch} {
			if !errors.Is(err, spindle.Invalid) || !strings.Contains(err.Error(), tc.say) {
				t.Errorf("%s: %v, want an Invalid error that mentions %q", tc.what, err, tc.say)
			}
		}
	}
	after, err := c.Glob(ctx, "ann@example.com/docs/*")
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != len(before) {
		t.Errorf("refused entries changed docs: %d entries, was %d", len(after), len(before))
	}
	// The node goes on serving the user.
	if _, err := c.Put(ctx, "@/docs/b", bytes.NewReader([]byte("fine")), 0, nil); err != nil {
		t.Fatalf("node stopped serving after bad names: %v", err)
	}
}

// A name stored before names had to be in NFC stays reachable: the client
// looks it up, opens, renames and deletes it as typed when its NFC form
// does not exist.
func TestOldNFDNames(t *testing.T) {
	n := startNode(t, t.TempDir())
	defer n.Close()
	c, keys := dialWithKeys(t, n, "ann@example.com")
	ctx := context.Background()
	if _, err := c.Put(ctx, "@/x", strings.NewReader("contents"), 0, nil); err != nil {
		t.Fatal(err)
	}
	// plant appends an entry straight to the node's dir server, past the
	// node's NFC check, as a node without the rule did.
	plant := func(d spindle.DirEntry) {
		h, err := n.dir.Head(ctx, "ann@example.com")
		if err != nil {
			t.Fatal(err)
		}
		e := &dirlog.Entry{Seq: h.Seq + 1, Prev: h.Hash, Time: spindle.Now(), Op: dirlog.OpMkdir, Entry: d, KeyAt: n.keyLogSize()}
		if d.Attr.IsLink() {
			e.Op = dirlog.OpLink
		}
		e.Entry.Sequence, e.Entry.Time = e.Seq, e.Time
		if err := e.Sign(keys); err != nil {
			t.Fatal(err)
		}
		if _, err := n.dir.Append(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	const nfd, nfc = "ann@example.com/cafe\u0301", "ann@example.com/caf\u00e9"
	plant(spindle.DirEntry{Name: nfd, Attr: spindle.AttrLink, Link: "ann@example.com/x"})
	plant(spindle.DirEntry{Name: nfd + "s", Attr: spindle.AttrDirectory})
	plant(spindle.DirEntry{Name: nfd + "2", Attr: spindle.AttrDirectory})

	if e, err := c.Lookup(ctx, nfd, false); err != nil || e.Name != nfd {
		t.Fatalf("lookup of an old NFD name: %v, %v", e, err)
	}
	mustRead(t, c, nfd, []byte("contents"))
	if err := c.Rename(ctx, nfd+"s", "@/renamed"); err != nil {
		t.Fatalf("rename of an old NFD name: %v", err)
	}
	if err := c.Delete(ctx, nfd+"2"); err != nil {
		t.Fatalf("delete of an old NFD name: %v", err)
	}
	// The NFC spelling still names its own file once there is one.
	if _, err := c.Put(ctx, nfc, strings.NewReader("new"), 0, nil); err != nil {
		t.Fatal(err)
	}
	mustRead(t, c, nfc, []byte("new"))
	mustRead(t, c, nfd, []byte("new"))
	if _, err := c.Lookup(ctx, "@/renamed", false); err != nil {
		t.Errorf("renamed: %v", err)
	}
	for _, gone := range []spindle.PathName{nfd + "s", nfd + "2"} {
		if _, err := n.dir.Lookup(ctx, "ann@example.com", gone); !errors.Is(err, spindle.NotExist) {
			t.Errorf("%q after rename or delete: %v", gone, err)
		}
	}
}
