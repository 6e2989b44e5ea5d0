package dirlog

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"spindle.dev"
	"spindle.dev/access"
)

// A Node is one item of a tree.
type Node struct {
	Entry  spindle.DirEntry // The item, as the tree holds it.
	Kids   map[string]*Node // Directories only.
	Access *access.Access   // Access files only: the parsed contents.
	grp    *access.Group    // Group files only: the parsed contents.
	// src is the signed entry that put the item, and moves the renames
	// that moved it since, oldest first: what its value in the tree map
	// is made of (see smt.go), for proofs.
	src   *Entry
	moves []*Entry
}

// A groupVersion is the state of a Group file from seq on; g is nil while
// the file does not exist.
type groupVersion struct {
	seq int64
	g   *access.Group
	src *Entry // The entry that put the file's contents; nil with g.
}

// A Tree is the fold of one user's log. It is not safe for concurrent use;
// the host guards it.
type Tree struct {
	user   spindle.UserName
	Root   *Node                               // The user's root directory; nil before the first entry.
	Seq    int64                               // The sequence number of the last entry folded.
	Head   Hash                                // Its hash.
	groups map[spindle.PathName][]groupVersion // History of every Group file.
	Access map[spindle.PathName]*access.Access // Every Access file, parsed.
	// Map is the tree as an authenticated map (see smt.go), which heads
	// commit to; nil in a fold that needs no map (the host's history of a log, for watchers).
	Map *treeMap
	// accessAt is, for every Access file name the log has put, deleted
	// or moved, the sequence number of the last entry that did: what an
	// entry's ReadersAt is checked against.
	accessAt map[spindle.PathName]int64
	// Since is the first sequence number whose changes the tree knows
	// of: 0 for a tree folded from the start of its log, the sequence
	// of the checkpoint it was folded from otherwise (whose dropped
	// entries may have deleted Access files).
	Since int64
	// KeyAt is the tree's anchor: the highest KeyAt of its entries,
	// which the next entry's may not be below.
	KeyAt int64
	// Log is the Merkle tree of the entries folded, whose root heads
	// sign; nil where the entries before the fold's start are not known
	// (a tree folded from a checkpoint that carries no log tree).
	Log *LogTree
	// steps are the map changes of the latest entries, for map steps.
	steps mapSteps
	// Bytes is the sum of the sizes of the files in the tree: what its
	// owner stores, as a node's quota counts it.
	Bytes int64
}

// NewTree returns the empty tree of user's log.
func NewTree(user spindle.UserName) *Tree {
	return &Tree{user: user, groups: make(map[spindle.PathName][]groupVersion), Access: make(map[spindle.PathName]*access.Access), Map: &treeMap{}, accessAt: make(map[spindle.PathName]int64), Log: &LogTree{}}
}

// MapRoot returns the root of the tree's map.
func (t *Tree) MapRoot() Hash {
	if t.Map == nil {
		return Hash{}
	}
	return t.Map.Root()
}

// LogRoot returns the root of the Merkle tree of the log up to t.Seq, and
// false if t does not know it (see [Tree.Log]).
func (t *Tree) LogRoot() (Hash, bool) {
	if t.Log == nil || t.Log.Len() != t.Seq {
		return Hash{}, false
	}
	r, err := t.Log.Root(t.Seq)
	return r, err == nil
}

// Find returns the node named by p, or nil. If the walk met a file or link
// where a directory was needed, that node is returned as blocker.
func (t *Tree) Find(p spindle.Parsed) (n, blocker *Node) {
	n = t.Root
	if n == nil {
		return nil, nil
	}
	for i := 0; i < p.NElem(); i++ {
		if !n.Entry.Attr.IsDir() {
			return nil, n
		}
		n = n.Kids[p.Elem(i)]
		if n == nil {
			return nil, nil
		}
	}
	return n, nil
}

// Lookup is find for a path name that need not be clean.
func (t *Tree) Lookup(name spindle.PathName) *Node {
	p, err := spindle.Parse(name)
	if err != nil || p.User() != t.user {
		return nil
	}
	n, _ := t.Find(p)
	return n
}

// LoadAccess is the tree's access.AccessLoader.
func (t *Tree) LoadAccess(name spindle.PathName) (*access.Access, error) {
	return t.Access[name], nil
}

// groupAt returns the Group file name as it was at sequence seq.
func (t *Tree) groupAt(name spindle.PathName, seq int64) (*access.Group, error) {
	h := t.groups[name]
	i := sort.Search(len(h), func(i int) bool { return h[i].seq > seq }) - 1
	if i < 0 || h[i].g == nil {
		// The message names no sequence: errors reach readers, and a
		// log's position is for those with rights on it. The host's
		// record of the decision keeps the sequence for replay.
		return nil, spindle.E(spindle.NotExist, name, "group does not exist")
	}
	return h[i].g, nil
}

// A RightsFunc answers access.Can for one tree with its loaders bound.
type RightsFunc func(user spindle.UserName, right access.Right, name spindle.PathName) (bool, error)

// Rights returns the rights under t's Access files, loading groups with
// loadGroup.
func (t *Tree) Rights(loadGroup access.GroupLoader) RightsFunc {
	return func(user spindle.UserName, right access.Right, name spindle.PathName) (bool, error) {
		return access.Can(user, right, name, t.LoadAccess, loadGroup)
	}
}

// Denied returns the error for a user who lacks a right on p, as Upspin's
// dir server does: Permission if the user has some right on p, so may know
// the name, Private otherwise. It never depends on whether p exists, nor on
// the user's rights elsewhere (a right on the parent tells nothing about a
// directory with an Access file of its own).
func Denied(can RightsFunc, user spindle.UserName, p spindle.Parsed) error {
	if ok, err := can(user, access.AnyRight, p.Path()); err == nil && ok {
		return spindle.E(spindle.Permission, p.Path(), user)
	}
	return spindle.E(spindle.Private, p.Path(), user)
}

// Undecided returns the error for a user whose right on p could not be
// decided: err, from access.Can, says why (a group that cannot be loaded).
// It is a denial (see denied) that carries err only if err tells the user
// nothing more than the user may know: which group the Access file of p
// names, and what is wrong with it. That needs a right on p (to read the
// Access file; the denial is then Permission) or the group being the
// user's own (whose owner is a member, so would hold the right), and a
// right on the group (a group's loader reports a group the user may not
// know of as Private: see the host's groupsFor). Anyone else learns only that
// the right is not granted.
func Undecided(can RightsFunc, user spindle.UserName, p spindle.Parsed, err error) error {
	if spindle.KindOf(err) == spindle.Invalid {
		return err // A bad request (a user name, a right), not a group.
	}
	d := Denied(can, user, p)
	if spindle.KindOf(err) == spindle.Private || (spindle.KindOf(d) == spindle.Private && !ownGroup(err, user)) {
		return d
	}
	return spindle.E(spindle.KindOf(d), p.Path(), user, err)
}

// ownGroup reports whether err is about a Group file of user's.
func ownGroup(err error, user spindle.UserName) bool {
	for ; err != nil; err = errors.Unwrap(err) {
		if se, ok := err.(*spindle.Error); ok && access.IsGroupFile(se.Path) {
			p, perr := spindle.Parse(se.Path)
			return perr == nil && p.User() == user
		}
	}
	return false
}

// Need checks that user holds right on p, returning the denial otherwise.
func Need(can RightsFunc, user spindle.UserName, right access.Right, p spindle.Parsed) error {
	ok, err := can(user, right, p.Path())
	if err != nil {
		return Undecided(can, user, p, err)
	}
	if !ok {
		return Denied(can, user, p)
	}
	return nil
}

// CleanName parses name and checks that it is clean and in tree user's tree.
func CleanName(name spindle.PathName, user spindle.UserName, what string) (spindle.Parsed, error) {
	p, err := spindle.Parse(name)
	if err != nil {
		return p, spindle.E(spindle.Invalid, name, err)
	}
	if p.Path() != name {
		return p, spindle.E(spindle.Invalid, name, fmt.Sprintf("%s is not clean (want %s)", what, p.Path()))
	}
	if user != "" && p.User() != user {
		return p, spindle.E(spindle.Invalid, name, fmt.Sprintf("%s is not in %s's tree", what, user))
	}
	return p, nil
}

// Ordinary is what Class calls a name that is not a control file.
const Ordinary = "an ordinary file"

// Class names what kind of control file, if any, a name is.
func Class(name spindle.PathName) string {
	switch {
	case access.IsAccessFile(name):
		return "an Access file"
	case access.IsGroupFile(name):
		return "a Group file"
	}
	return Ordinary
}

// check decides whether e may be appended to the tree: it checks everything
// but the signature. loadGroup loads groups, the tree's own and other
// users'. The result depends only on the tree and on what loadGroup returns.
func (t *Tree) check(e *Entry, loadGroup access.GroupLoader) error {
	if e.Seq != t.Seq+1 || e.Prev != t.Head {
		return spindle.E(spindle.Transient, e.Entry.Name, e.Writer, fmt.Sprintf("log head moved: entry is for sequence %d after %.12s, head is %d at %.12s; read the head and sign again", e.Seq, e.Prev, t.Seq, t.Head))
	}
	return t.CheckOp(e, loadGroup)
}

// CheckOp is check without the check of the entry's place in the log.
func (t *Tree) CheckOp(e *Entry, loadGroup access.GroupLoader) error {
	if err := checkFields(e, t.user); err != nil {
		return err
	}
	writer := e.Writer
	p, _ := spindle.Parse(e.Entry.Name)
	can := t.Rights(loadGroup)
	if e.KeyAt < t.KeyAt {
		return spindle.E(spindle.Stale, p.Path(), writer, "the entry is anchored in the key log before an entry already in the tree; follow the key log and sign again")
	}

	if t.Root == nil {
		if e.Op == OpMkdir && p.IsRoot() && writer == t.user {
			return nil
		}
		if err := Need(can, writer, access.AnyRight, p); err != nil {
			return err
		}
		return spindle.E(spindle.NotExist, p.Path(), writer, "the tree has no root yet: its first entry must be the owner's mkdir of the root")
	}

	n, blocker := t.Find(p)
	switch e.Op {
	case OpPut, OpLink, OpMkdir:
		right := access.Create
		if n != nil && e.Op != OpMkdir {
			right = access.Write
			if writer == t.user && isRewrap(&n.Entry, &e.Entry) {
				// The owner re-wraps a file's key for its readers: the
				// contents stay as they are, so read (which the owner
				// always has) is enough. Sharing must never need write.
				right = access.Read
			}
		}
		if err := Need(can, writer, right, p); err != nil {
			return err
		}
		if err := t.checkParent(p, blocker, writer); err != nil {
			return err
		}
		if n != nil {
			if e.Op == OpMkdir {
				return spindle.E(spindle.Exist, p.Path(), writer)
			}
			if n.Entry.Attr.IsDir() {
				return spindle.E(spindle.IsDir, p.Path(), writer, "cannot replace a directory")
			}
		}
		if e.Op == OpPut && e.Entry.Packing == spindle.EEPack && Class(p.Path()) == Ordinary && !e.Legacy {
			return t.checkReadersAt(p, e, loadGroup)
		}
		return nil

	case OpDelete:
		if err := Need(can, writer, access.Delete, p); err != nil {
			return err
		}
		if p.IsRoot() {
			return spindle.E(spindle.Invalid, p.Path(), writer, "cannot delete the root")
		}
		if blocker != nil {
			return BlockedBy(blocker, p, writer)
		}
		if n == nil {
			return spindle.E(spindle.NotExist, p.Path(), writer)
		}
		if len(n.Kids) > 0 {
			return spindle.E(spindle.NotEmpty, p.Path(), writer)
		}
		return nil

	case OpRename:
		q, _ := spindle.Parse(e.NewName)
		if err := Need(can, writer, access.Delete, p); err != nil {
			return err
		}
		if err := Need(can, writer, access.Create, q); err != nil {
			return err
		}
		if p.IsRoot() || q.IsRoot() {
			return spindle.E(spindle.Invalid, p.Path(), writer, "cannot rename the root")
		}
		if q.HasPrefix(p) {
			return spindle.E(spindle.Invalid, p.Path(), writer, fmt.Sprintf("cannot move %s inside itself to %s", p.Path(), q.Path()))
		}
		if blocker != nil {
			return BlockedBy(blocker, p, writer)
		}
		if n == nil {
			return spindle.E(spindle.NotExist, p.Path(), writer)
		}
		dst, dstBlocker := t.Find(q)
		if err := t.checkParent(q, dstBlocker, writer); err != nil {
			return err
		}
		if dst != nil {
			return spindle.E(spindle.Exist, q.Path(), writer)
		}
		// Every moved file keeps its class, and moved Access and Group
		// files need the rights their new names need (the owner's).
		var err error
		Walk(n, func(m *Node) bool {
			if m.Entry.Attr.IsDir() {
				return true
			}
			old := m.Entry.Name
			now := spindle.PathName(string(q.Path()) + strings.TrimPrefix(string(old), string(p.Path())))
			if Class(old) != Class(now) {
				err = spindle.E(spindle.Invalid, old, writer, fmt.Sprintf("moving %s to %s would make %s into %s", old, now, Class(old), Class(now)))
				return false
			}
			if Class(old) != Ordinary {
				np, _ := spindle.Parse(now)
				if err = Need(can, writer, access.Create, np); err != nil {
					return false
				}
				op, _ := spindle.Parse(old)
				if err = Need(can, writer, access.Delete, op); err != nil {
					return false
				}
			}
			return true
		})
		return err
	}
	return spindle.E(spindle.Invalid, p.Path(), writer, "unknown operation "+e.Op.String())
}

// checkReadersAt checks that the readers of e, an encrypted file's put at
// p, were worked out under the Access state in force now: that neither
// the Access file governing p, nor any Access file in a directory between
// it and p, nor a Group file of the tree that its read right names
// (directly or through other groups), changed after e.ReadersAt. A writer
// fooled into wrapping the file key for a reader whom the owner had
// removed (by an older WhichAccess answer or Group file replayed to it)
// is refused with Stale, and works the readers out again.
//
// Group files of other users' trees are loaded as the entry's other
// checks load them (the host records how far into each log), but the
// entry names no position in those logs: a Group file of another tree
// that changed after the writer read it is not caught here. The writer's
// client checks every answer against the newest head it has seen of that
// tree, and a tree's own Access file decides whether to name a group of
// another user at all.
//
// Changes before t.Since are not known (a checkpoint dropped them): an
// entry whose readers were worked out before it is judged on what is
// known, and the sequencer, which refuses such an entry outright (see
// [Tree.ReadersKnown]), is the stricter of the two.
func (t *Tree) checkReadersAt(p spindle.Parsed, e *Entry, loadGroup access.GroupLoader) error {
	at := e.ReadersAt
	changed := false
	a, err := access.WhichAccess(p.Path(), func(name spindle.PathName) (*access.Access, error) {
		if t.accessAt[name] > at {
			changed = true
		}
		return t.LoadAccess(name)
	})
	if err != nil {
		return err
	}
	if !changed {
		_, _, err = a.KnownUsers(access.Read, func(name spindle.PathName) (*access.Group, error) {
			if q, err := spindle.Parse(name); err == nil && q.User() == t.user {
				if h := t.groups[q.Path()]; len(h) > 0 && h[len(h)-1].seq > at {
					changed = true
				}
			}
			return loadGroup(name)
		})
		if err != nil {
			return err
		}
	}
	if changed {
		return spindle.E(spindle.Stale, p.Path(), e.Writer, "the Access or Group files that decide who may read the file changed after its readers were worked out; work them out again")
	}
	return nil
}

// ReadersKnown reports, with an error of kind Stale, an entry whose
// readers were worked out before the first change the tree knows of
// (see [Tree.Since]), which a sequencer refuses rather than judge.
func (t *Tree) ReadersKnown(e *Entry) error {
	if !e.Legacy && e.ReadersAt < t.Since && e.Op == OpPut && e.Entry.Packing == spindle.EEPack {
		return spindle.E(spindle.Stale, e.Entry.Name, e.Writer, "the readers were worked out before the log's checkpoint; work them out again")
	}
	return nil
}

// checkParent checks that the parent of p exists and is a directory.
func (t *Tree) checkParent(p spindle.Parsed, blocker *Node, writer spindle.UserName) error {
	if blocker != nil {
		return BlockedBy(blocker, p, writer)
	}
	parent, blocker := t.Find(p.Dir())
	if blocker != nil {
		return BlockedBy(blocker, p, writer)
	}
	if parent == nil {
		return spindle.E(spindle.NotExist, p.Path(), writer, "parent directory "+string(p.Dir().Path())+" does not exist")
	}
	if !parent.Entry.Attr.IsDir() {
		return BlockedBy(parent, p, writer)
	}
	return nil
}

// BlockedBy is the error for a path that runs through a file or link.
func BlockedBy(b *Node, p spindle.Parsed, user spindle.UserName) error {
	if b.Entry.Attr.IsLink() {
		return spindle.E(spindle.NotDir, p.Path(), user, fmt.Sprintf("path crosses link %s; follow it", b.Entry.Name))
	}
	return spindle.E(spindle.NotDir, p.Path(), user, string(b.Entry.Name)+" is not a directory")
}

// checkFields checks the parts of an entry that do not depend on the tree.
func checkFields(e *Entry, user spindle.UserName) error {
	d := &e.Entry
	invalid := func(msg string) error { return spindle.E(spindle.Invalid, d.Name, e.Writer, msg) }
	if _, err := CleanName(d.Name, user, "name"); err != nil {
		return err
	}
	if w, err := spindle.CleanUser(e.Writer); err != nil || w != e.Writer {
		return invalid(fmt.Sprintf("writer %q is not a clean user name", e.Writer))
	}
	if d.Writer != e.Writer {
		return invalid(fmt.Sprintf("entry writer %s differs from log entry writer %s", d.Writer, e.Writer))
	}
	if d.Sequence != e.Seq {
		return invalid(fmt.Sprintf("entry sequence %d differs from log sequence %d", d.Sequence, e.Seq))
	}
	if e.Op != OpRename && e.NewName != "" {
		return invalid("new name set on a " + e.Op.String())
	}
	if e.Legacy && (e.ReadersAt != 0 || e.KeyAt != 0) {
		return invalid("an entry of the first format has no readers' sequence or key log size")
	}
	if e.ReadersAt < 0 || e.ReadersAt >= e.Seq || e.KeyAt < 0 {
		return invalid(fmt.Sprintf("readers' sequence %d is not below the entry's %d, or key log size %d is negative", e.ReadersAt, e.Seq, e.KeyAt))
	}
	bare := d.Attr == 0 && d.Packing == 0 && d.Size == 0 && d.Time == 0 && len(d.Blocks) == 0 &&
		len(d.Packdata) == 0 && d.Link == "" && len(d.Inline) == 0
	ctl := access.IsAccessFile(d.Name) || access.IsGroupFile(d.Name)
	switch e.Op {
	case OpDelete:
		if !bare {
			return invalid("a delete entry carries only name, writer and sequence")
		}
	case OpRename:
		if !bare {
			return invalid("a rename entry carries only name, new name, writer and sequence")
		}
		if _, err := CleanName(e.NewName, user, "new name"); err != nil {
			return err
		}
	case OpMkdir:
		if d.Attr != spindle.AttrDirectory || d.Packing != 0 || d.Size != 0 || len(d.Blocks) != 0 ||
			len(d.Packdata) != 0 || d.Link != "" || len(d.Inline) != 0 {
			return invalid("a directory entry has the directory attribute and no packing, size, blocks, packdata, link or inline data")
		}
		if access.IsAccessFile(d.Name) {
			return invalid("a directory cannot be named Access")
		}
	case OpLink:
		if d.Attr != spindle.AttrLink || d.Size != 0 || len(d.Blocks) != 0 || len(d.Inline) != 0 {
			return invalid("a link entry has the link attribute and no size, blocks or inline data")
		}
		if ctl {
			return invalid("a link cannot be " + Class(d.Name))
		}
		if _, err := CleanName(d.Link, "", "link target"); err != nil {
			return err
		}
	case OpPut:
		if d.Attr != spindle.AttrNone {
			return invalid("put makes files; use mkdir or link for directories and links")
		}
		if d.Link != "" {
			return invalid("a file entry has no link target")
		}
		if ctl {
			if len(d.Blocks) != 0 || d.Size != int64(len(d.Inline)) {
				return invalid(Class(d.Name) + " travels in the entry's inline data: no blocks, size equal to its length")
			}
			var err error
			if access.IsAccessFile(d.Name) {
				_, err = access.Parse(d.Name, d.Inline)
			} else {
				_, err = access.ParseGroup(d.Name, d.Inline)
			}
			if err != nil {
				return spindle.E(spindle.Invalid, d.Name, e.Writer, err)
			}
			return nil
		}
		if len(d.Inline) != 0 {
			return invalid("only Access and Group files carry inline data")
		}
		if d.Packing == spindle.UnknownPack {
			return invalid("a file needs a packing")
		}
		var off int64
		for i, b := range d.Blocks {
			if b.Ref == "" || b.Size <= 0 || b.Size > spindle.MaxBlockSize || b.Offset != off {
				return invalid(fmt.Sprintf("block %d (ref %q, offset %d, size %d) does not continue the file at offset %d with 1 to %d bytes", i, b.Ref, b.Offset, b.Size, off, spindle.MaxBlockSize))
			}
			off += b.Size
		}
		if off != d.Size {
			return invalid(fmt.Sprintf("blocks hold %d bytes, size is %d", off, d.Size))
		}
	default:
		return invalid("unknown operation " + e.Op.String())
	}
	return nil
}

// A Change is one event of an applied entry, with the Access files that
// governed the item and its directory at that moment (before a delete,
// after a put), by which watchers' rights are judged.
type Change struct {
	Event     spindle.Event  // The event.
	Access    *access.Access // Governs the item.
	DirAccess *access.Access // Governs the item's directory (acc, but for directories).
}

// changeOf returns the change ev makes, with the Access files governing
// its item and the item's directory now.
func (t *Tree) changeOf(ev spindle.Event) Change {
	acc := t.governing(ev.Entry.Name)
	dacc := acc // A file is governed by its directory's Access file.
	if ev.Entry.Attr.IsDir() {
		if p, err := spindle.Parse(ev.Entry.Name); err == nil && !p.IsRoot() {
			dacc = t.governing(p.Dir().Path())
		}
	}
	return Change{ev, acc, dacc}
}

// governing returns the Access file that governs name now.
func (t *Tree) governing(name spindle.PathName) *access.Access {
	a, err := access.WhichAccess(name, t.LoadAccess)
	if err != nil {
		return access.New(name) // Cannot happen for a name in the tree; grants the owner only.
	}
	return a
}

// Apply folds a checked entry into the tree and returns the changes, in
// order. An entry that cannot be applied to the tree (its name, or the
// directory it needs, is not there) leaves the tree as it was and gives
// an error of kind Invalid: a checked entry always applies, so the error
// says the entry was not checked against this tree.
func (t *Tree) Apply(e *Entry) ([]Change, error) {
	if err := t.applies(e); err != nil {
		return nil, spindle.E(spindle.Invalid, e.Entry.Name, fmt.Errorf("entry %d does not apply: %w", e.Seq, err))
	}
	seq := e.Seq
	hash := e.Hash()
	p, _ := spindle.Parse(e.Entry.Name)
	t.steps.start()
	defer t.steps.end(e, seq)
	var changes []Change
	gone := func(n *Node) {
		d := CloneEntry(&n.Entry)
		d.Sequence = seq
		changes = append(changes, t.changeOf(spindle.Event{Entry: d, Delete: true}))
	}
	switch e.Op {
	case OpPut, OpLink, OpMkdir:
		// The node shares the entry's slices: the tree owns e (decoded
		// from its encoding), and neither copy's slices are changed in
		// place; answers are cloned.
		n := &Node{Entry: e.Entry, src: e}
		if e.Op == OpMkdir {
			n.Kids = make(map[string]*Node)
		}
		old, _ := t.Find(p)
		if old != nil {
			t.Bytes -= old.Entry.Size
		}
		t.Bytes += n.Entry.Size
		n.Entry.Signed = signedRecords(e, old)
		parseControl(n)
		if p.IsRoot() {
			t.Root = n
		} else {
			parent, _ := t.Find(p.Dir())
			parent.Kids[p.Last()] = n
		}
		t.noteControl(n.Entry.Name, n, seq)
		t.mapSet(n.Entry.Name, hash)
		changes = append(changes, t.changeOf(spindle.Event{Entry: CloneEntry(&n.Entry)}))
	case OpDelete:
		parent, _ := t.Find(p.Dir())
		n := parent.Kids[p.Last()]
		gone(n)
		t.Bytes -= n.Entry.Size
		delete(parent.Kids, p.Last())
		t.noteControl(n.Entry.Name, nil, seq)
		t.mapDelete(n.Entry.Name)
	case OpRename:
		q, _ := spindle.Parse(e.NewName)
		parent, _ := t.Find(p.Dir())
		n := parent.Kids[p.Last()]
		Walk(n, func(m *Node) bool {
			gone(m)
			return true
		})
		delete(parent.Kids, p.Last())
		rec := e.Marshal()
		var moved []Hash // Map values of the moved items, in walk order.
		Walk(n, func(m *Node) bool {
			t.noteControl(m.Entry.Name, nil, seq)
			moved = append(moved, t.mapDelete(m.Entry.Name))
			if !m.Entry.Attr.IsDir() {
				if m.Entry.SignedName == "" {
					// The writer signed the old name; readers verify
					// against it, and follow the signed renames from it.
					m.Entry.SignedName = m.Entry.Name
				}
				m.Entry.Signed = append(slices.Clip(m.Entry.Signed), rec)
			}
			m.Entry.Name = spindle.PathName(string(q.Path()) + strings.TrimPrefix(string(m.Entry.Name), string(p.Path())))
			m.Entry.Sequence = seq
			parseControl(m)
			return true
		})
		dst, _ := t.Find(q.Dir())
		dst.Kids[q.Last()] = n
		i := 0
		Walk(n, func(m *Node) bool {
			t.noteControl(m.Entry.Name, m, seq)
			t.mapSet(m.Entry.Name, MovedValue(hash, moved[i]))
			m.moves = append(m.moves, e)
			i++
			return true
		})
		Walk(n, func(m *Node) bool {
			changes = append(changes, t.changeOf(spindle.Event{Entry: CloneEntry(&m.Entry)}))
			return true
		})
		t.stamp(q, seq)
	}
	t.stamp(p, seq)
	t.Seq = seq
	t.Head = hash
	t.KeyAt = max(t.KeyAt, e.KeyAt)
	if t.Log != nil {
		t.Log.Append(hash)
	}
	return changes, nil
}

// applies reports why e cannot be applied to t, if it cannot: Apply
// changes the tree only after it has passed.
func (t *Tree) applies(e *Entry) error {
	p, err := spindle.Parse(e.Entry.Name)
	if err != nil {
		return err
	}
	dir := func(p spindle.Parsed) error {
		n, _ := t.Find(p)
		if n == nil || !n.Entry.Attr.IsDir() || n.Kids == nil {
			return errors.New("no directory " + string(p.Path()))
		}
		return nil
	}
	switch e.Op {
	case OpPut, OpLink, OpMkdir:
		if p.IsRoot() {
			return nil
		}
		return dir(p.Dir())
	case OpDelete, OpRename:
		if p.IsRoot() {
			return errors.New("the root cannot be removed or moved")
		}
		if err := dir(p.Dir()); err != nil {
			return err
		}
		if n, _ := t.Find(p); n == nil {
			return errors.New("no item " + string(p.Path()))
		}
		if e.Op == OpDelete {
			return nil
		}
		q, err := spindle.Parse(e.NewName)
		if err != nil {
			return err
		}
		if q.IsRoot() || q.HasPrefix(p) && q.NElem() > p.NElem() {
			return errors.New("cannot move " + string(p.Path()) + " to " + string(q.Path()))
		}
		return dir(q.Dir())
	}
	return fmt.Errorf("unknown operation %d", e.Op)
}

// signedRecords returns the signed log entries a reader needs to check
// the name of the item e puts (see [spindle.DirEntry.Signed]), where old
// is the item it replaces, if any. An Access or Group file or a link
// carries e itself, whose signature covers its name and its text or
// target. A file carries its own signature over its name in its packdata,
// and needs nothing, unless it is a re-wrap of a moved file made before
// hosts refused client-set signed names: the renames that moved the file
// it replaces then prove the name still.
func signedRecords(e *Entry, old *Node) [][]byte {
	switch {
	case e.Op == OpLink, e.Op == OpPut && Class(e.Entry.Name) != Ordinary:
		return [][]byte{e.Marshal()}
	case e.Op == OpPut && e.Entry.SignedName != "" && old != nil && old.Entry.SignedPath() == e.Entry.SignedName:
		return old.Entry.Signed
	}
	return nil
}

// mapSet sets the value of name in the tree's map, if it keeps one.
func (t *Tree) mapSet(name spindle.PathName, val Hash) {
	if t.Map != nil {
		k := MapKey(name)
		if t.steps.on {
			old, had := t.Map.Get(k)
			t.steps.cur = append(t.steps.cur, MapChange{Key: k, HadOld: had, Old: old, HasNew: true, New: val, Name: name})
		}
		t.Map.Set(k, val)
	}
}

// mapDelete removes name from the tree's map, if it keeps one, and returns
// the value it had.
func (t *Tree) mapDelete(name spindle.PathName) Hash {
	if t.Map == nil {
		return Hash{}
	}
	k := MapKey(name)
	v, had := t.Map.Get(k)
	if t.steps.on && had {
		t.steps.cur = append(t.steps.cur, MapChange{Key: k, HadOld: true, Old: v, Name: name})
	}
	t.Map.Delete(k)
	return v
}

// stamp sets seq on p, if it exists, and on every directory above it.
func (t *Tree) stamp(p spindle.Parsed, seq int64) {
	n := t.Root
	for i := 0; n != nil; i++ {
		n.Entry.Sequence = seq
		if i == p.NElem() || !n.Entry.Attr.IsDir() {
			return
		}
		n = n.Kids[p.Elem(i)]
	}
}

// noteControl records that from seq on the node at name is n (nil if
// none), if name is an Access or Group file.
func (t *Tree) noteControl(name spindle.PathName, n *Node, seq int64) {
	if access.IsAccessFile(name) {
		t.accessAt[name] = seq
		if n != nil && n.Access != nil {
			t.Access[name] = n.Access
		} else {
			delete(t.Access, name)
		}
		return
	}
	if !access.IsGroupFile(name) {
		return
	}
	var g *access.Group
	var src *Entry
	if n != nil && n.grp != nil {
		g, src = n.grp, n.src
	}
	h := t.groups[name]
	if len(h) == 0 && g == nil {
		return
	}
	if len(h) > 0 && h[len(h)-1].seq == seq {
		h[len(h)-1].g, h[len(h)-1].src = g, src
	} else {
		h = append(h, groupVersion{seq, g, src})
	}
	t.groups[name] = h
}

// parseControl sets n.acc or n.grp from the inline contents of an Access
// or Group file. The contents were checked when the entry was, so a parse
// error here cannot happen; if it did, the node would grant nothing.
func parseControl(n *Node) {
	n.Access, n.grp = nil, nil
	if n.Entry.Attr != spindle.AttrNone {
		return
	}
	switch name := n.Entry.Name; {
	case access.IsAccessFile(name):
		n.Access, _ = access.Parse(name, n.Entry.Inline)
	case access.IsGroupFile(name):
		n.grp, _ = access.ParseGroup(name, n.Entry.Inline)
	}
}

// Walk calls fn on n and, while fn returns true, on everything below it,
// parents before children, children in name order.
func Walk(n *Node, fn func(*Node) bool) bool {
	if !fn(n) {
		return false
	}
	if len(n.Kids) == 0 {
		return true
	}
	names := make([]string, 0, len(n.Kids))
	for k := range n.Kids {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		if !Walk(n.Kids[k], fn) {
			return false
		}
	}
	return true
}

// CloneEntry returns a deep copy of d.
func CloneEntry(d *spindle.DirEntry) *spindle.DirEntry {
	c := *d
	c.Blocks = append([]spindle.DirBlock(nil), d.Blocks...)
	c.Packdata = append([]byte(nil), d.Packdata...)
	c.Inline = append([]byte(nil), d.Inline...)
	c.Signed = slices.Clone(d.Signed) // The records themselves are never changed.
	if len(d.Blocks) == 0 {
		c.Blocks = nil
	}
	if len(d.Packdata) == 0 {
		c.Packdata = nil
	}
	if len(d.Inline) == 0 {
		c.Inline = nil
	}
	return &c
}

// isRewrap reports whether put replaces old with the same contents: same
// kind, packing, size and blocks, so that only the packdata (the wrapped
// keys and the signature) can differ.
func isRewrap(old, put *spindle.DirEntry) bool {
	if old.Attr != put.Attr || old.Attr != spindle.AttrNone || old.Packing != put.Packing ||
		old.Size != put.Size || len(old.Blocks) != len(put.Blocks) || old.Inline != nil || put.Inline != nil {
		return false
	}
	for i := range old.Blocks {
		if old.Blocks[i] != put.Blocks[i] {
			return false
		}
	}
	return true
}

// CheckUser checks that user is a clean user name; an error is Invalid.
func CheckUser(user spindle.UserName) error {
	if u, err := spindle.CleanUser(user); err != nil || u != user {
		return spindle.E(spindle.Invalid, user, "requesting user is not a clean user name")
	}
	return nil
}
