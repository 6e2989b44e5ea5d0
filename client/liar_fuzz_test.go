package client

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"spindle.dev"
	"spindle.dev/dirlog"
	"spindle.dev/node"
	"spindle.dev/node/wire"
	"spindle.dev/node/wire/wiretest"
	"spindle.dev/p2p"
)

// The client's answer handling, fuzzed with a lying node as the
// adversary: the fuzzer rewrites the node's answers to the client's
// reads (lookup, glob, whichaccess, head), as bytes on the wire or as the
// decoded messages' fields (heads, proofs, entries, error kinds), and the
// client, a real one over a real node, must neither panic nor hang, and
// must accept nothing the honest answer does not say.

// A rawLiar is a node whose encoded answers a fuzz input rewrites.
type rawLiar struct {
	mu sync.Mutex
	fn func(method string, out []byte) []byte // Nil: answer honestly.
}

func newRawLiar(t testing.TB, n *node.Node) *rawLiar {
	t.Helper()
	l := &rawLiar{}
	p2p.Handle(context.Background(), n.Host(), wire.ClientProtocol, wire.MaxMessage, func(ctx context.Context, remote peer.ID, data []byte) ([]byte, error) {
		out, err := n.ServeClient(ctx, remote, data)
		l.mu.Lock()
		fn := l.fn
		l.mu.Unlock()
		if err != nil || fn == nil {
			return out, err
		}
		var req wire.Request
		if wire.Decode(data, &req) != nil {
			return out, err
		}
		return fn(req.Method, out), nil
	})
	return l
}

func (l *rawLiar) tell(fn func(method string, out []byte) []byte) {
	l.mu.Lock()
	l.fn = fn
	l.mu.Unlock()
}

// The reads the fuzzer lies to, and what each is about.
const (
	fuzzLookup = iota
	fuzzOpen
	fuzzGlob
	fuzzWhich
	fuzzHead
	fuzzAudit
	fuzzReads
)

var fuzzMethods = [fuzzReads]string{wire.DirLookup, wire.DirLookup, wire.DirGlob, wire.DirWhich, wire.DirHead, wire.DirEntries}

var fuzzNames = []spindle.PathName{
	"ann@example.com/docs/a.txt",
	"ann@example.com/docs/Access",
	"ann@example.com/docs/link",
	"ann@example.com/docs/dirlink/c.txt",
	"ann@example.com/docs/sub",
	"ann@example.com/docs/sub/c.txt",
	"ann@example.com/docs/none",
	"ann@example.com/docs/a.txt/x",
	"ann@example.com/Group/friends",
	"ann@example.com/list/f.txt",
	"ann@example.com/list/sub",
	"ann@example.com/list/link",
	"ann@example.com/list/link/x",
}

var fuzzPatterns = []string{"ann@example.com/docs/*", "ann@example.com/*/*", "ann@example.com/docs/sub/*", "ann@example.com/list/*"}

// A fuzzResult is what a read returned, reduced to what can be compared.
type fuzzResult struct {
	entries []*spindle.DirEntry
	data    []byte
	head    *dirlog.Head
	err     error
}

// fuzzWorld is a node with ann's tree, the honest answers to every read
// the fuzzer lies to, and the encoded honest answers it starts from. The
// reads are ann's, who may read all of her tree, and carol's, who may
// list ann's list directory but read nothing (her answers are
// incomplete entries).
type fuzzWorld struct {
	w      *lieWorld
	carol  *Client
	l      *rawLiar
	honest map[[3]int]fuzzResult
	truth  map[spindle.PathName]*spindle.DirEntry // Entries by name, as the owner reads them.
	wire   map[[3]int][][]byte                    // The encoded answers each read got.
}

func newFuzzWorld(t testing.TB) *fuzzWorld {
	w := newLieWorld(t)
	w.mkdir(t, "@/docs/sub")
	w.put(t, "@/docs/sub/c.txt", "below")
	if _, err := w.ann.PutLink(w.ctx, "@/docs/a.txt", "@/docs/link"); err != nil {
		t.Fatal(err)
	}
	if _, err := w.ann.PutLink(w.ctx, "@/docs/sub", "@/docs/dirlink"); err != nil {
		t.Fatal(err)
	}
	carol := dialAs(t, w.n, "carol@example.com")
	w.mkdir(t, "@/list")
	w.mkdir(t, "@/list/sub")
	w.put(t, "@/list/Access", "list: carol@example.com\n*: ann@example.com\n")
	w.put(t, "@/list/f.txt", "secret")
	if _, err := w.ann.PutLink(w.ctx, "@/list/sub", "@/list/link"); err != nil {
		t.Fatal(err)
	}
	f := &fuzzWorld{w: w, carol: carol, l: newRawLiar(t, w.n), honest: map[[3]int]fuzzResult{}, wire: map[[3]int][][]byte{}}
	for k := range fuzzReads * 2 {
		op, who := k%fuzzReads, k/fuzzReads
		for i := range f.targets(op) {
			var got [][]byte
			var mu sync.Mutex
			f.l.tell(func(method string, out []byte) []byte {
				if method == fuzzMethods[op] {
					mu.Lock()
					got = append(got, out)
					mu.Unlock()
				}
				return out
			})
			f.honest[[3]int{op, i, who}] = f.read(op, i, who)
			f.l.tell(nil)
			f.wire[[3]int{op, i, who}] = got
		}
	}
	f.truth = map[spindle.PathName]*spindle.DirEntry{}
	for k, r := range f.honest {
		if k[2] != 0 || k[0] != fuzzLookup && k[0] != fuzzGlob {
			continue
		}
		for _, e := range r.entries {
			if e != nil {
				f.truth[e.Name] = e
			}
		}
	}
	return f
}

// targets returns how many names or patterns op reads.
func (f *fuzzWorld) targets(op int) int {
	switch op {
	case fuzzGlob:
		return len(fuzzPatterns)
	case fuzzHead, fuzzAudit:
		return 1
	}
	return len(fuzzNames)
}

// read makes the read op of target i, as ann (who 0) or carol.
func (f *fuzzWorld) read(op, i, who int) fuzzResult {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := f.w.ann
	if who != 0 {
		c = f.carol
	}
	var r fuzzResult
	switch op {
	case fuzzLookup:
		var e *spindle.DirEntry
		e, r.err = c.Lookup(ctx, fuzzNames[i], true)
		r.entries = []*spindle.DirEntry{e}
	case fuzzOpen:
		var file spindle.File
		if file, r.err = c.Open(ctx, fuzzNames[i]); r.err == nil {
			r.data, r.err = io.ReadAll(file)
			file.Close()
		}
	case fuzzGlob:
		r.entries, r.err = c.Glob(ctx, fuzzPatterns[i])
	case fuzzWhich:
		var e *spindle.DirEntry
		e, r.err = c.WhichAccess(ctx, fuzzNames[i])
		r.entries = []*spindle.DirEntry{e}
	case fuzzHead:
		r.head, r.err = c.DirHead(ctx, "ann@example.com")
	case fuzzAudit:
		var rep *AuditReport
		if rep, r.err = c.Audit(ctx); r.err == nil {
			r.head = rep.Head
		}
	}
	return r
}

// sameEntry reports whether the entry got says nothing the honest one
// does not: the same item at the same name, or the name alone (a file
// the reader may not read is proved present only, so a node may show any
// item so, which withholds it as a refusal would). The mark of an entry
// the reader may not read withholds too, and the sequence number may move
// on.
func sameEntry(got, want *spindle.DirEntry) bool {
	if got == nil || want == nil {
		return got == want
	}
	if reflect.DeepEqual(got, &spindle.DirEntry{Name: want.Name, Attr: spindle.AttrIncomplete}) {
		return true
	}
	return got.Name == want.Name && got.Attr&^spindle.AttrIncomplete == want.Attr&^spindle.AttrIncomplete && got.Packing == want.Packing &&
		got.Time == want.Time && got.Size == want.Size && slices.Equal(got.Blocks, want.Blocks) &&
		string(got.Packdata) == string(want.Packdata) && got.Link == want.Link &&
		string(got.Inline) == string(want.Inline) && got.Writer == want.Writer
}

// check fails the test if got, the result of read op of target i by who,
// answered by the fuzzed node, accepts what is not so: an entry or a
// listed entry that is not the one at its name (as the owner's honest
// reads show the tree), contents or an Access file other than the owner
// reads, a head other than the honest one, or a NotExist the client acts
// on for a name that exists. A node may always refuse, and may answer a
// reader with true entries the reader's rights would not have shown (it
// holds them): that is no lie the client can catch.
func (f *fuzzWorld) check(t *testing.T, op, i, who int, got fuzzResult) {
	t.Helper()
	want := f.honest[[3]int{op, i, who}]
	owner := f.honest[[3]int{op, i, 0}]
	if got.err != nil {
		// A NotExist a client acts on (a lookup's, a listing's) must be
		// proved; one of WhichAccess or Head only fails the command.
		acts := op == fuzzLookup || op == fuzzOpen || op == fuzzGlob
		if acts && errors.Is(got.err, spindle.NotExist) && !errors.Is(owner.err, spindle.NotExist) {
			t.Fatalf("accepted NotExist, honestly %v: %v", owner.err, got.err)
		}
		return
	}
	switch op {
	case fuzzLookup:
		if e := got.entries[0]; e == nil || !sameEntry(e, f.truth[e.Name]) {
			t.Fatalf("accepted %+v, honestly %+v", e, owner.entries[0])
		}
	case fuzzWhich:
		if owner.err != nil || !sameEntry(got.entries[0], owner.entries[0]) {
			t.Fatalf("accepted %+v, honestly %+v (%v)", got.entries[0], owner.entries[0], owner.err)
		}
	case fuzzOpen:
		if owner.err != nil || string(got.data) != string(owner.data) {
			t.Fatalf("read %q, honestly %q (%v)", got.data, owner.data, owner.err)
		}
	case fuzzGlob:
		for _, e := range got.entries {
			if !sameEntry(e, f.truth[e.Name]) {
				t.Fatalf("listed %+v, honestly %+v", e, f.truth[e.Name])
			}
		}
	case fuzzHead, fuzzAudit:
		if want.err != nil || got.head == nil || got.head.Seq != want.head.Seq || got.head.Hash != want.head.Hash || got.head.Root != want.head.Root {
			t.Fatalf("accepted head %+v, honestly %+v (%v)", got.head, want.head, want.err)
		}
	}
}

// lie returns the answer the fuzz input makes of out, the honest answer:
// mode picks what is rewritten, and edits say how; others are the honest
// answers of the same method to other reads, which a liar may replay.
func lie(out []byte, mode byte, edits []byte, others [][]byte) []byte {
	switch mode % 6 {
	case 0: // The bytes on the wire.
		return editBytes(out, edits)
	case 1, 2, 3: // A proof, the head or the entries, as bytes.
		var resp wiretest.Response
		if wire.Decode(out, &resp) != nil {
			return out
		}
		switch mode % 6 {
		case 1:
			if len(edits) == 0 {
				return out
			}
			if len(resp.DirProofs) == 0 {
				resp.DirProofs = [][]byte{editBytes(nil, edits[1:])}
			} else {
				i := int(edits[0]) % len(resp.DirProofs)
				resp.DirProofs[i] = editBytes(resp.DirProofs[i], edits[1:])
			}
		case 2:
			b, err := wire.Encode(resp.Head)
			if err != nil {
				return out
			}
			var h *dirlog.Head
			if wire.Decode(editBytes(b, edits), &h) != nil {
				return out
			}
			resp.Head = h
		case 3:
			b, err := wire.Encode(struct {
				E  *spindle.DirEntry
				Es []*spindle.DirEntry
			}{resp.Entry, resp.Entries})
			if err != nil {
				return out
			}
			var v struct {
				E  *spindle.DirEntry
				Es []*spindle.DirEntry
			}
			if wire.Decode(editBytes(b, edits), &v) != nil {
				return out
			}
			resp.Entry, resp.Entries = v.E, v.Es
		}
		b, err := wire.Encode(&resp)
		if err != nil {
			return out
		}
		return b
	case 4: // The error kind, with or without what the answer carries.
		var resp wiretest.Response
		if wire.Decode(out, &resp) != nil || len(edits) == 0 {
			return out
		}
		if edits[0]&0x80 != 0 {
			resp.Entry, resp.Entries = nil, nil
		}
		if edits[0]&0x40 != 0 {
			resp.DirProofs = nil
		}
		if edits[0]&0x20 != 0 {
			resp.Err = nil
		} else {
			resp.Err = wire.ErrBytes(spindle.E(spindle.Kind(edits[0]&0x1f), "ann@example.com/docs/a.txt"))
		}
		b, err := wire.Encode(&resp)
		if err != nil {
			return out
		}
		return b
	default: // Another read's honest answer, edited.
		if len(others) == 0 || len(edits) == 0 {
			return out
		}
		return editBytes(others[int(edits[0])%len(others)], edits[1:])
	}
}

// editBytes applies edits to a copy of b: each edit is four bytes, an
// operation, a 16-bit offset (modulo the length) and a value: flip the
// bits of a byte, set it, insert a byte, delete a byte, or cut b there.
func editBytes(b []byte, edits []byte) []byte {
	b = append([]byte(nil), b...)
	for len(edits) >= 4 {
		op, off, v := edits[0], int(binary.BigEndian.Uint16(edits[1:3])), edits[3]
		edits = edits[4:]
		if len(b) == 0 {
			b = append(b, v)
			continue
		}
		off %= len(b)
		switch op % 5 {
		case 0:
			b[off] ^= v | 1
		case 1:
			b[off] = v
		case 2:
			b = slices.Insert(b, off, v)
		case 3:
			b = slices.Delete(b, off, off+1)
		case 4:
			b = b[:off]
		}
	}
	return b
}

// FuzzClientAgainstLiar: whatever a node answers a client's reads, the
// client neither panics nor hangs, and accepts nothing the honest answer
// does not say: no entry, listing, file contents, head or NotExist that
// the signed heads and proofs do not prove.
func FuzzClientAgainstLiar(f *testing.F) {
	f.Add(uint8(fuzzLookup), uint8(0), uint8(0), []byte{0, 0, 40, 1})
	f.Add(uint8(fuzzLookup), uint8(2), uint8(1), []byte{0, 0, 0, 30, 7})
	f.Add(uint8(fuzzLookup), uint8(6), uint8(5), []byte{0, 1, 0, 0, 0})
	f.Add(uint8(fuzzLookup), uint8(0), uint8(4), []byte{byte(spindle.NotExist) | 0x40})
	f.Add(uint8(fuzzOpen), uint8(3), uint8(3), []byte{1, 0, 20, 0})
	f.Add(uint8(fuzzGlob), uint8(0), uint8(1), []byte{1, 0, 0, 100, 2})
	f.Add(uint8(fuzzGlob), uint8(1), uint8(3), []byte{3, 0, 9, 0})
	f.Add(uint8(fuzzWhich), uint8(5), uint8(1), []byte{0, 4, 0, 60, 255})
	f.Add(uint8(fuzzWhich), uint8(0), uint8(4), []byte{0xa0})
	f.Add(uint8(fuzzHead), uint8(0), uint8(2), []byte{0, 0, 30, 1})
	fw := newFuzzWorld(f)
	f.Fuzz(func(t *testing.T, op, target, mode uint8, edits []byte) {
		o := int(op) % fuzzReads
		who := int(op) / fuzzReads % 2
		i := int(target) % fw.targets(o)
		var others [][]byte
		for k, v := range fw.wire {
			if fuzzMethods[k[0]] == fuzzMethods[o] {
				others = append(others, v...)
			}
		}
		slices.SortFunc(others, func(a, b []byte) int { return slices.Compare(a, b) })
		fw.l.tell(func(method string, out []byte) []byte {
			if method != fuzzMethods[o] {
				return out
			}
			return lie(out, mode, edits, others)
		})
		defer fw.l.tell(nil)
		start := time.Now()
		got := fw.read(o, i, who)
		if d := time.Since(start); d > 10*time.Second {
			t.Fatalf("the read took %v", d)
		}
		fw.check(t, o, i, who, got)
	})
}

// The fuzz harness lies: a NotExist without proof, told for a file that
// exists, reaches the client and is refused, and the honest reads it
// compares with succeed where they should.
func TestFuzzLiarLies(t *testing.T) {
	fw := newFuzzWorld(t)
	for _, k := range [][3]int{{fuzzLookup, 0, 0}, {fuzzLookup, 3, 0}, {fuzzOpen, 2, 0}, {fuzzGlob, 0, 0}, {fuzzWhich, 0, 0}, {fuzzHead, 0, 0}, {fuzzAudit, 0, 0}, {fuzzGlob, 3, 1}, {fuzzLookup, 11, 1}} {
		if r := fw.honest[k]; r.err != nil {
			t.Fatalf("honest read %v: %v", k, r.err)
		}
		if len(fw.wire[k]) == 0 {
			t.Fatalf("read %v: no answer recorded", k)
		}
	}
	if r := fw.honest[[3]int{fuzzOpen, 2, 0}]; string(r.data) != "the contract, final" {
		t.Fatalf("read through the link: %q", r.data)
	}
	if r := fw.honest[[3]int{fuzzLookup, 9, 1}]; r.entries[0] == nil || !r.entries[0].Attr.IsIncomplete() {
		t.Fatalf("carol's lookup of a file she may not read: %+v, %v", r.entries[0], r.err)
	}
	if r := fw.honest[[3]int{fuzzLookup, 6, 0}]; !errors.Is(r.err, spindle.NotExist) {
		t.Fatalf("honest lookup of a missing name: %v", r.err)
	}
	fw.l.tell(func(method string, out []byte) []byte {
		return lie(out, 4, []byte{byte(spindle.NotExist) | 0xc0}, nil)
	})
	defer fw.l.tell(nil)
	got := fw.read(fuzzLookup, 0, 0)
	wantIntegrity(t, got.err, "NotExist without proof")
}
