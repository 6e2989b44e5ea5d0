package dirlog

import (
	"bytes"
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
	// for an exclusion, and for a file the reader may not read whose entry
	// holds blocks or packdata (see [Withholds]): the reader may not see
	// them, so only the name's presence is proved. A directory or link
	// the reader may not read hides nothing and is proved whole.
	Entries []*Entry
	// Above is set for a NotExist: it proves, from the root down, that
	// each directory above Name exists and is a directory (an inclusion
	// with the signed entries that made it one), so that no link on the
	// way, which the reader would have been shown, is hidden. Name is
	// then the name looked up, or the first directory above it that does
	// not exist. See [Proved.VerifyNotExist].
	Above []*Proved
}

// ProveItem proves the inclusion of n in the tree's map, with the signed
// entries its value is made of if whole is set or if they hide nothing
// (see [Withholds]): a directory or link, shown to a reader who may not
// read it, is proved whole all the same, so that every directory and link
// a reader is shown can be matched (see [Proved.Matches]).
func (t *Tree) ProveItem(n *Node, whole bool) *Proved {
	whole = whole || !Withholds(&n.Entry)
	k := MapKey(n.Entry.Name)
	v, _ := t.Map.Get(k)
	pr := &Proved{Name: n.Entry.Name, Proof: t.Map.Prove(k), Value: v}
	if whole && n.src != nil {
		// Copies: returned values are never shared with the caller.
		for _, e := range append([]*Entry{n.src}, n.moves...) {
			c := *e
			c.Entry = *CloneEntry(&e.Entry)
			c.Sig = append(spindle.Signature(nil), e.Sig...)
			pr.Entries = append(pr.Entries, &c)
		}
	}
	return pr
}

// Withholds reports whether d, shown to a reader who may list it but not
// read it, must be shown without parts of it: its blocks and packdata,
// which its signed entry holds too. Such an entry can be proved present
// only; any other (a directory, a link, an Access or Group file, a file
// with neither) hides nothing, and its proof carries the signed entries
// that match it.
func Withholds(d *spindle.DirEntry) bool {
	return len(d.Blocks) > 0 || len(d.Packdata) > 0
}

// ProveNotExist proves that p does not exist: the exclusion of p, or of
// the first directory above it that does not exist, with the proofs that
// every directory above that is one (see [Proved.Above]).
func (t *Tree) ProveNotExist(p spindle.Parsed) *Proved {
	var above []*Proved
	n := t.Root
	for i := 0; i < p.NElem(); i++ {
		if n == nil || !n.Entry.Attr.IsDir() {
			break // Not for a NotExist; the proof will not verify.
		}
		above = append(above, t.ProveItem(n, true))
		n = n.Kids[p.Elem(i)]
		if n == nil {
			pr := t.ProveAbsent(p.First(i + 1).Path())
			pr.Above = above
			return pr
		}
	}
	if t.Root == nil {
		return t.ProveAbsent(p.First(0).Path())
	}
	pr := t.ProveAbsent(p.Path())
	pr.Above = above
	return pr
}

// ProveAbsent proves that name is not in the tree's map.
func (t *Tree) ProveAbsent(name spindle.PathName) *Proved {
	return &Proved{Name: name, Proof: t.Map.Prove(MapKey(name))}
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
