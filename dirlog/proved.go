package dirlog

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"

	"spindle.dev"
)

// A Proved is what proves a read's answer against a signed head: that a
// name maps in the head's tree map to a value (inclusion), or is absent
// (exclusion).
type Proved struct {
	Head  *Head            // Signed by the host; the proof is against Head.Root.
	Name  spindle.PathName // The name proved.
	Proof *MapProof
	// Value is the name's value in the map, for an inclusion.
	Value Hash
	// Entries are, for an inclusion shown whole to the reader, the signed
	// entry that put the item and then every rename that moved it, oldest
	// first, from which Value follows (see [Proved.Verify]). They are nil
	// for an exclusion, and for an item the reader may not read: its entry
	// holds the blocks and packdata the reader may not see, so only the
	// name's presence is proved.
	Entries []*Entry
	// Above is set for a NotExist: it proves, from the root down, that
	// each directory above Name exists and is a directory (an inclusion
	// with the signed entries that made it one), so that no link on the
	// way, which the reader would have been shown, is hidden. Name is
	// then the name looked up, or the first directory above it that does
	// not exist. See [Proved.VerifyNotExist].
	Above []*Proved
}

// LookupProved is [Server.Lookup] with a proof of its answer against the
// current signed head: for an entry, the inclusion of its name (for a
// link met on the way, of the link's name), with the signed entries its
// value is made of if the user may read it; for NotExist, the exclusion
// of the name or of the first directory above it that does not exist,
// with the proofs that every directory above that is one (Proved.Above);
// for NotDir through a file, the exclusion of the name. Denials (Private,
// Permission) and other errors carry no proof. The answer and the proof
// are taken from one state of the tree; if the log moves on before the
// head for that state is signed, LookupProved tries again, and after a
// few tries fails with kind Transient.
func (s *Server) LookupProved(ctx context.Context, user spindle.UserName, name spindle.PathName) (*spindle.DirEntry, *Proved, error) {
	const op spindle.Op = "dirlog.LookupProved"
	if err := checkUser(user); err != nil {
		return nil, nil, spindle.E(op, name, err)
	}
	p, err := spindle.Parse(name)
	if err != nil {
		return nil, nil, spindle.E(op, user, err)
	}
	var d *spindle.DirEntry
	var pr *Proved
	perr := s.provedAt(ctx, p.User(), func() (int64, bool) {
		var seq int64
		d, pr, seq, err = s.lookupProved(user, p)
		return seq, pr != nil
	}, func(h *Head) { pr.Head = h })
	if perr != nil {
		return nil, nil, spindle.E(op, p.Path(), user, perr)
	}
	if err != nil {
		err = spindle.E(op, p.Path(), user, err)
	}
	return d, pr, err
}

// GlobProved is [Server.Glob] with a proof of each entry's inclusion
// against the current signed head, taken from one state of the tree, as
// [Server.LookupProved] proves one entry. It cannot prove that no match
// was left out: the map is keyed by hashed names, which have no order to
// prove a range with. Errors carry no proof.
func (s *Server) GlobProved(ctx context.Context, user spindle.UserName, pattern string) ([]*spindle.DirEntry, []*Proved, *Head, error) {
	const op spindle.Op = "dirlog.GlobProved"
	if err := checkUser(user); err != nil {
		return nil, nil, nil, spindle.E(op, spindle.PathName(pattern), err)
	}
	p, err := parsePattern(pattern)
	if err != nil {
		return nil, nil, nil, spindle.E(op, user, err)
	}
	var out []*spindle.DirEntry
	var prs []*Proved
	var head *Head
	perr := s.provedAt(ctx, p.User(), func() (int64, bool) {
		var seq int64
		out, prs, seq, err = s.globAt(user, p, true)
		return seq, err == nil
	}, func(h *Head) { head = h })
	if perr != nil {
		return nil, nil, nil, spindle.E(op, p.Path(), user, perr)
	}
	if err != nil {
		return nil, nil, nil, spindle.E(op, p.Path(), user, err)
	}
	return out, prs, head, nil
}

// provedAt runs answer, which answers a read and makes its proofs from one
// state of owner's tree and returns that state's sequence number (and
// false if it made no proof), and then gives set the signed head of that
// state. If the log moved on between the two, it tries again; after a few
// tries it fails with kind Transient. An error of answer's is returned
// as it is (answers may carry an entry and an error together).
func (s *Server) provedAt(ctx context.Context, owner spindle.UserName, answer func() (int64, bool), set func(*Head)) error {
	for try := 0; try < 8; try++ {
		if err := ctx.Err(); err != nil {
			return spindle.E(spindle.Transient, err)
		}
		seq, ok := answer()
		if !ok {
			return nil
		}
		h, err := s.Head(ctx, owner)
		if err != nil {
			return err
		}
		if h.Seq == seq {
			set(h)
			return nil
		}
	}
	return spindle.E(spindle.Transient, "the log kept moving; try again")
}

// lookupProved answers the lookup and makes its proof, without the head,
// from one state of the tree, whose sequence number it returns.
func (s *Server) lookupProved(user spindle.UserName, p spindle.Parsed) (*spindle.DirEntry, *Proved, int64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.damageFor(p.User(), user); err != nil {
		return nil, nil, 0, err
	}
	r := s.readerFor(p.User(), user)
	d, err := r.lookup(p)
	seq := r.t.seq
	if r.t.m == nil {
		return d, nil, seq, err
	}
	n, blocker := r.t.find(p)
	switch {
	case err == nil && n != nil:
	case spindle.KindOf(err) == spindle.NotDir && d != nil && blocker != nil:
		n = blocker // The link to follow.
	case spindle.KindOf(err) == spindle.NotExist:
		return d, r.t.proveNotExist(p), seq, err
	case spindle.KindOf(err) == spindle.NotDir && d == nil:
		return d, r.t.proveAbsent(p.Path()), seq, err
	default:
		return d, nil, seq, err
	}
	return d, r.t.proveItem(n, d.Attr&spindle.AttrIncomplete == 0), seq, err
}

// proveItem proves the inclusion of n in the tree's map, with the signed
// entries its value is made of if whole is set.
func (t *tree) proveItem(n *node, whole bool) *Proved {
	k := MapKey(n.entry.Name)
	v, _ := t.m.Get(k)
	pr := &Proved{Name: n.entry.Name, Proof: t.m.Prove(k), Value: v}
	if whole && n.src != nil {
		// Copies: returned values are never shared with the caller.
		for _, e := range append([]*Entry{n.src}, n.moves...) {
			c := *e
			c.Entry = *cloneEntry(&e.Entry)
			c.Sig = append(spindle.Signature(nil), e.Sig...)
			pr.Entries = append(pr.Entries, &c)
		}
	}
	return pr
}

// proveNotExist proves that p does not exist: the exclusion of p, or of
// the first directory above it that does not exist, with the proofs that
// every directory above that is one (see [Proved.Above]).
func (t *tree) proveNotExist(p spindle.Parsed) *Proved {
	var above []*Proved
	n := t.root
	for i := 0; i < p.NElem(); i++ {
		if n == nil || !n.entry.Attr.IsDir() {
			break // Not for a NotExist; the proof will not verify.
		}
		above = append(above, t.proveItem(n, true))
		n = n.kids[p.Elem(i)]
		if n == nil {
			pr := t.proveAbsent(p.First(i + 1).Path())
			pr.Above = above
			return pr
		}
	}
	if t.root == nil {
		return t.proveAbsent(p.First(0).Path())
	}
	pr := t.proveAbsent(p.Path())
	pr.Above = above
	return pr
}

// proveAbsent proves that name is not in the tree's map.
func (t *tree) proveAbsent(name spindle.PathName) *Proved {
	return &Proved{Name: name, Proof: t.m.Prove(MapKey(name))}
}

// Verify checks that pr proves its answer against pr.Head.Root: for an
// inclusion, that pr.Name maps to pr.Value and, if pr.Entries are given,
// that Value follows from them (the hash of the first, chained with
// [MovedValue] through each rename after it) and that they bring the item
// to pr.Name; for an exclusion, that pr.Name is absent. It checks neither
// the head's signature (see [Head.Verify]) nor the entries' signatures,
// which need the host's and the writers' keys. Failures are Integrity.
func (pr *Proved) Verify() error {
	const op spindle.Op = "dirlog.Proved.Verify"
	if pr.Head == nil || pr.Proof == nil {
		return spindle.E(op, spindle.Integrity, pr.Name, "no head or no proof")
	}
	key := MapKey(pr.Name)
	if pr.Proof.End != EndIncluded {
		if err := pr.Proof.VerifyAbsent(pr.Head.Root, key); err != nil {
			return spindle.E(op, pr.Name, err)
		}
		return nil
	}
	if err := pr.Proof.VerifyIncluded(pr.Head.Root, key, pr.Value); err != nil {
		return spindle.E(op, pr.Name, err)
	}
	if len(pr.Entries) == 0 {
		return nil
	}
	v, name, err := chain(pr.Entries)
	if err != nil {
		return spindle.E(op, spindle.Integrity, pr.Name, err)
	}
	if name != pr.Name || v != pr.Value {
		return spindle.E(op, spindle.Integrity, pr.Name, fmt.Sprintf("the entries bring %s with value %.12s, not %s with %.12s", name, v, pr.Name, pr.Value))
	}
	return nil
}

// VerifyNotExist checks that pr, with its head set, proves that name does
// not exist: that pr is an exclusion of name or of a directory above it,
// and that pr.Above proves every directory above that, from the root
// down, to exist as a directory. Failures are Integrity.
func (pr *Proved) VerifyNotExist(name spindle.PathName) error {
	const op spindle.Op = "dirlog.Proved.VerifyNotExist"
	p, err := spindle.Parse(name)
	if err != nil {
		return spindle.E(op, spindle.Integrity, err)
	}
	k := len(pr.Above)
	if k > p.NElem() || pr.Name != p.First(k).Path() {
		return spindle.E(op, spindle.Integrity, name, fmt.Sprintf("proves the absence of %s, with %d directories above it", pr.Name, k))
	}
	if pr.Proof == nil || pr.Proof.End == EndIncluded {
		return spindle.E(op, spindle.Integrity, name, "no proof of absence")
	}
	if err := pr.Verify(); err != nil {
		return spindle.E(op, name, err)
	}
	for i, a := range pr.Above {
		want := p.First(i).Path()
		if a.Name != want || a.Proof == nil || a.Proof.End != EndIncluded || len(a.Entries) == 0 {
			return spindle.E(op, spindle.Integrity, name, fmt.Sprintf("no proof that %s is a directory", want))
		}
		if a.Entries[0].Op != OpMkdir {
			return spindle.E(op, spindle.Integrity, name, fmt.Sprintf("%s is a %s, not a directory", want, a.Entries[0].Op))
		}
		a.Head = pr.Head
		if err := a.Verify(); err != nil {
			return spindle.E(op, name, err)
		}
	}
	return nil
}

// chain returns the map value and the name of an item put by es[0] and
// moved by the renames after it.
func chain(es []*Entry) (Hash, spindle.PathName, error) {
	first := es[0]
	switch first.Op {
	case OpPut, OpMkdir, OpLink:
	default:
		return Hash{}, "", fmt.Errorf("first entry is a %s, not what puts an item", first.Op)
	}
	v, name := first.Hash(), first.Entry.Name
	for i, e := range es[1:] {
		from := e.Entry.Name
		if e.Op != OpRename || e.Seq <= es[i].Seq {
			return Hash{}, "", fmt.Errorf("entry %d is a %s at sequence %d, not a later rename", i+2, e.Op, e.Seq)
		}
		if name != from && !strings.HasPrefix(string(name), string(from)+"/") {
			return Hash{}, "", fmt.Errorf("rename at sequence %d moves %s, which does not hold %s", e.Seq, from, name)
		}
		name = e.NewName + name[len(from):]
		v = MovedValue(e.Hash(), v)
	}
	return v, name, nil
}

// Matches checks that d, an entry a host served with pr, is the item pr's
// entries put: the same contents (attributes, packing, time, size,
// blocks, packdata, link target, inline text) by the same writer, at
// pr.Name. Only an inclusion with entries can be matched; a reader calls
// Matches after [Proved.Verify], so that the entry shown is the one the
// signed head commits to at that name. Failures are Integrity.
func (pr *Proved) Matches(d *spindle.DirEntry) error {
	const op spindle.Op = "dirlog.Proved.Matches"
	if d == nil || len(pr.Entries) == 0 {
		return spindle.E(op, spindle.Integrity, pr.Name, "no entry, or no signed entries to match it with")
	}
	src := &pr.Entries[0].Entry
	var what string
	switch {
	case d.Name != pr.Name:
		what = "name " + string(d.Name)
	case d.Attr&^spindle.AttrIncomplete != src.Attr:
		what = "attributes"
	case d.Packing != src.Packing:
		what = "packing"
	case d.Time != src.Time:
		what = "time"
	case d.Size != src.Size:
		what = "size"
	case !slices.Equal(d.Blocks, src.Blocks):
		what = "blocks"
	case !bytes.Equal(d.Packdata, src.Packdata):
		what = "packdata"
	case d.Link != src.Link:
		what = "link target"
	case !bytes.Equal(d.Inline, src.Inline):
		what = "contents"
	case d.Writer != pr.Entries[0].Writer:
		what = "writer " + string(d.Writer)
	case d.Sequence < pr.Entries[0].Seq:
		// The sequence number decides which of a writer's keys may have
		// signed (spindle.User.DirSeq); it is never before the put.
		what = fmt.Sprintf("sequence number %d", d.Sequence)
	default:
		return nil
	}
	return spindle.E(op, spindle.Integrity, pr.Name, fmt.Sprintf("the entry served differs in its %s from the one the signed head commits to (sequence %d)", what, pr.Entries[0].Seq))
}
