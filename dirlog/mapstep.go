package dirlog

import (
	"encoding/binary"
	"fmt"
	"slices"
	"sort"
	"strings"

	"spindle.dev"
)

// # Map steps
//
// A consistency proof (see [CheckStep]) shows that a head's log extends
// an older head's, and the owner's client checks the entries in between;
// neither shows that the map root the newer head signs is the one those
// entries make. A host could sign the genuine next entry over the map of
// an older state, and answer reads from it.
//
// A map step closes that for a reader who has the entries (the owner):
// the host sends, for every entry from the older head's sequence to its
// own newest, the changes the entry made to the map (key, value before,
// value after), and a path in its newest map to every key they touch,
// with the leaves beside those paths. The reader
//
//  1. checks that each entry's changes are the ones the entry makes (a
//     put sets its name to the entry's hash, a delete removes its name,
//     a rename moves names below its own to the new name, each with
//     [MovedValue]);
//  2. grafts the paths into a partial map, whose root must be the one
//     the host's newest map has: every path is bound to it;
//  3. undoes the changes, newest first, each checked against the value
//     the partial map holds, back to the older head; the root must then
//     be the one the older head signs, which binds every claimed old
//     value and everything the paths do not show;
//  4. replays the changes of the entries it checked, up to the newer
//     head; the root must be the one the newer head signs.
//
// The host keeps the changes of its latest [MapStepWindow] entries only
// (and none from before a checkpoint its tree was folded from); steps
// further back stand on their consistency proof and entries.
//
// What it does not catch: a rename whose changes leave out some of the
// names below the moved one. The keys are hashes of names and a map
// cannot prove that a key range is empty, so a reader cannot tell that
// the list is whole.

const (
	mapStepMagic = "SPDLM1"
	// MapStepWindow is how many of a log's latest entries a host keeps
	// the map changes of, and so the longest step it can prove.
	MapStepWindow = 4096
	// maxMapStepChanges bounds the changes a host keeps (a rename of a
	// large directory makes two per item moved).
	maxMapStepChanges = 1 << 18
)

// A MapChange is one change an entry made to its tree's map: the value of
// Key went from Old (if HadOld; else Key was absent) to New (if HasNew;
// else Key was removed).
type MapChange struct {
	Key            Hash
	HadOld, HasNew bool
	Old, New       Hash
	// Name is the item's name, for the changes of a rename: the reader
	// checks that the names moved are below the renamed one.
	Name spindle.PathName
}

// A MapStep is what a reader who holds a log's entries needs to check the
// map roots that heads sign across them (see above).
type MapStep struct {
	From, To int64         // The changes of entries From+1 to To.
	Root     Hash          // The map's root after entry To.
	Changes  [][]MapChange // Changes[i] are those of entry From+1+i.
	Paths    []MapPath     // A path, in the map after To, to every key changed.
	Leaves   []MapLeaf     // Leaves beside those paths.
}

// A MapPath proves what the map holds at Key.
type MapPath struct {
	Key     Hash
	Present bool
	Val     Hash // If Present.
	Proof   *MapProof
}

// A MapLeaf is a subtree beside a path that holds one item: deleting the
// key beside it raises it (see treeMap.del), so a reader must know it is
// a leaf, not only its hash.
type MapLeaf struct {
	Depth    int
	Key, Val Hash
}

// mapSteps keeps the map changes of a tree's latest entries.
type mapSteps struct {
	from int64         // list holds the changes of entries from+1 on.
	list [][]MapChange // One per entry.
	n    int           // Changes in list.
	on   bool          // Apply is recording into cur.
	cur  []MapChange
}

func (s *mapSteps) start() { s.on, s.cur = true, nil }

// end keeps the changes Apply recorded for e, the entry at seq.
func (s *mapSteps) end(e *Entry, seq int64) {
	cur := s.cur
	s.on, s.cur = false, nil
	if e.Op != OpRename {
		for i := range cur {
			cur[i].Name = ""
		}
	}
	if s.from+int64(len(s.list)) != seq-1 {
		// The first entry applied, or the first after a fold from a
		// checkpoint: the changes before it are not known.
		s.from, s.list, s.n = seq-1, nil, 0
	}
	s.list = append(s.list, cur)
	s.n += len(cur)
	for len(s.list) > 0 && (len(s.list) > MapStepWindow || s.n > maxMapStepChanges) {
		s.n -= len(s.list[0])
		s.list[0] = nil
		s.list = s.list[1:]
		s.from++
	}
}

// MapStep returns the map step from entry from to the tree's head, for a
// reader holding entries from+1 on (see above). It is NotExist if the tree
// does not keep the changes of all of them.
func (t *Tree) MapStep(from int64) (*MapStep, error) {
	const op spindle.Op = "dirlog.MapStep"
	if t.Map == nil || from < t.steps.from || from > t.Seq || t.steps.from+int64(len(t.steps.list)) != t.Seq {
		return nil, spindle.E(op, spindle.NotExist, t.user, fmt.Sprintf("this host keeps the map changes of entries %d to %d of the log, not from %d", t.steps.from+1, t.steps.from+int64(len(t.steps.list)), from+1))
	}
	// The lists of changes are never changed once kept; the list of them
	// is, as the window moves.
	st := &MapStep{From: from, To: t.Seq, Root: t.Map.Root(), Changes: slices.Clone(t.steps.list[from-t.steps.from:])}
	keys := make(map[Hash]bool)
	for _, cs := range st.Changes {
		for _, c := range cs {
			keys[c.Key] = true
		}
	}
	sorted := make([]Hash, 0, len(keys))
	for k := range keys {
		sorted = append(sorted, k)
	}
	sort.Slice(sorted, func(i, j int) bool { return string(sorted[i][:]) < string(sorted[j][:]) })
	leaves := make(map[MapLeaf]bool)
	for _, k := range sorted {
		val, ok := t.Map.Get(k)
		st.Paths = append(st.Paths, MapPath{Key: k, Present: ok, Val: val, Proof: t.Map.Prove(k)})
		for _, l := range t.Map.leavesBeside(k) {
			if !leaves[l] {
				leaves[l] = true
				st.Leaves = append(st.Leaves, l)
			}
		}
	}
	return st, nil
}

// leavesBeside returns the leaves beside the path of key.
func (m *treeMap) leavesBeside(key Hash) []MapLeaf {
	var out []MapLeaf
	n := m.root
	for d := 0; ; d++ {
		x, ok := n.(*mapInner)
		if !ok {
			return out
		}
		b := bit(&key, d)
		if l, ok := x.kids[1-b].(*mapLeaf); ok {
			out = append(out, MapLeaf{Depth: d + 1, Key: l.key, Val: l.val})
		}
		n = x.kids[b]
	}
}

// CheckMapStep checks, for a reader holding entries, the log's entries
// from floor's sequence + 1 to got's, checked already to be chained from
// floor to got and signed, that the map root got signs is the one those
// entries make from the map root floor signs, with st, the host's map
// step from floor (see above). A failure is Integrity and names both
// heads.
func CheckMapStep(floor, got *Head, entries []*Entry, st *MapStep) error {
	const op spindle.Op = "dirlog.CheckMapStep"
	bad := func(format string, args ...any) error {
		return spindle.E(op, spindle.Integrity, got.User, fmt.Sprintf("the head at sequence %d (%s, map root %s) from %s does not follow from the head at %d (map root %s) the client saw: ", got.Seq, got.Hash, got.Root, from(got), floor.Seq, floor.Root)+fmt.Sprintf(format, args...))
	}
	if st.From != floor.Seq || st.To < got.Seq || int64(len(st.Changes)) != st.To-st.From || int64(len(entries)) != got.Seq-floor.Seq {
		return bad("the host's map step covers entries %d to %d (%d lists of changes), for %d entries from %d", st.From+1, st.To, len(st.Changes), len(entries), floor.Seq+1)
	}
	for i, e := range entries {
		if e.Seq != floor.Seq+1+int64(i) {
			return bad("entry %d is given as entry %d", e.Seq, floor.Seq+1+int64(i))
		}
		if err := changesOf(e, st.Changes[i]); err != nil {
			return bad("entry %d (%s of %s): %v", e.Seq, e.Op, e.Entry.Name, err)
		}
	}
	m, err := graft(st)
	if err != nil {
		return bad("%v", err)
	}
	// Back to the floor, newest change first.
	for i := len(st.Changes) - 1; i >= 0; i-- {
		cs := st.Changes[i]
		for j := len(cs) - 1; j >= 0; j-- {
			c := &cs[j]
			if !m.move(c.Key, c.HasNew, c.New, c.HadOld, c.Old) {
				return bad("entry %d's change of key %.12s does not match the map after it", st.From+1+int64(i), c.Key)
			}
		}
	}
	if m.missing {
		return bad("the host's paths do not reach every key changed")
	}
	if r := m.Root(); r != floor.Root {
		return bad("undoing the host's changes back to entry %d gives map root %s", floor.Seq, r)
	}
	// Forward to got, through the entries the reader holds.
	for i := range entries {
		for _, c := range st.Changes[i] {
			if !m.move(c.Key, c.HadOld, c.Old, c.HasNew, c.New) {
				return bad("entry %d's change of key %.12s does not match the map before it", st.From+1+int64(i), c.Key)
			}
		}
	}
	if m.missing {
		return bad("the host's paths do not reach every key changed")
	}
	if r := m.Root(); r != got.Root {
		return bad("its entries make map root %s", r)
	}
	return nil
}

// move changes key from val (absent unless had) to to (absent unless
// has), and reports whether the map held val.
func (m *treeMap) move(key Hash, had bool, val Hash, has bool, to Hash) bool {
	if v, ok := m.Get(key); ok != had || ok && v != val {
		return false
	}
	if has {
		m.Set(key, to)
	} else {
		m.Delete(key)
	}
	return true
}

// changesOf checks that cs are the map changes e makes, but for the old
// values, which undoing them to a known root checks.
func changesOf(e *Entry, cs []MapChange) error {
	h := e.Hash()
	name := e.Entry.Name
	switch e.Op {
	case OpPut, OpLink, OpMkdir:
		if len(cs) != 1 || cs[0].Key != MapKey(name) || !cs[0].HasNew || cs[0].New != h {
			return fmt.Errorf("%d changes, not the one that sets its name to the entry", len(cs))
		}
	case OpDelete:
		if len(cs) != 1 || cs[0].Key != MapKey(name) || cs[0].HasNew || !cs[0].HadOld {
			return fmt.Errorf("%d changes, not the one that removes its name", len(cs))
		}
	case OpRename:
		k := len(cs) / 2
		if k == 0 || len(cs)%2 != 0 {
			return fmt.Errorf("%d changes; a rename removes and sets as many names", len(cs))
		}
		for i, d := range cs[:k] {
			s := cs[k+i]
			below := d.Name == name || strings.HasPrefix(string(d.Name), string(name)+"/")
			if i == 0 && d.Name != name || !below || d.Key != MapKey(d.Name) || d.HasNew || !d.HadOld {
				return fmt.Errorf("change %d does not remove %s or a name below it", i, name)
			}
			to := e.NewName + d.Name[len(name):]
			if s.Name != to || s.Key != MapKey(to) || !s.HasNew || s.New != MovedValue(h, d.Old) {
				return fmt.Errorf("change %d does not move %s to %s", k+i, d.Name, to)
			}
		}
	default:
		return fmt.Errorf("unknown operation %d", e.Op)
	}
	return nil
}

// graft returns the partial map that st's paths and leaves show, each
// path checked against st.Root, and the whole checked to have that root.
func graft(st *MapStep) (*treeMap, error) {
	leaves := make(map[Hash]MapLeaf, len(st.Leaves))
	for _, l := range st.Leaves {
		if l.Depth < 1 || l.Depth > MapDepth {
			return nil, fmt.Errorf("a leaf at depth %d", l.Depth)
		}
		leaves[leafHash(l.Depth, &l.Key, &l.Val)] = l
	}
	node := func(h Hash, d int) mapNode {
		if h.IsZero() {
			return nil
		}
		if l, ok := leaves[h]; ok && l.Depth == d {
			return (&mapLeaf{key: l.Key, val: l.Val}).place(d)
		}
		return &mapStub{hash: h}
	}
	m := &treeMap{}
	for _, p := range st.Paths {
		if p.Proof == nil {
			return nil, fmt.Errorf("no proof for key %.12s", p.Key)
		}
		var err error
		if p.Present {
			err = p.Proof.VerifyIncluded(st.Root, p.Key, p.Val)
		} else {
			err = p.Proof.VerifyAbsent(st.Root, p.Key)
		}
		if err != nil {
			return nil, fmt.Errorf("path of key %.12s: %w", p.Key, err)
		}
		slot := &m.root
		for d, sib := range p.Proof.Siblings {
			x, ok := (*slot).(*mapInner)
			if !ok {
				if *slot != nil {
					if _, stub := (*slot).(*mapStub); !stub {
						return nil, fmt.Errorf("path of key %.12s crosses another's leaf at depth %d", p.Key, d)
					}
				}
				x = &mapInner{}
				*slot = x
			}
			b := bit(&p.Key, d)
			if o := x.kids[1-b]; o == nil || isStub(o) {
				x.kids[1-b] = node(sib, d+1)
			}
			slot = &x.kids[b]
		}
		d := len(p.Proof.Siblings)
		var end mapNode
		switch p.Proof.End {
		case EndIncluded:
			end = (&mapLeaf{key: p.Key, val: p.Val}).place(d)
		case EndOtherLeaf:
			end = (&mapLeaf{key: p.Proof.LeafKey, val: p.Proof.LeafValue}).place(d)
		}
		switch x := (*slot).(type) {
		case nil, *mapStub:
			*slot = end
		case *mapLeaf:
			if l, ok := end.(*mapLeaf); !ok || l.key != x.key {
				return nil, fmt.Errorf("path of key %.12s ends where another path's leaf is", p.Key)
			}
		default:
			return nil, fmt.Errorf("path of key %.12s ends above another path", p.Key)
		}
	}
	if r := rehashAll(m.root, 0); r != st.Root {
		return nil, fmt.Errorf("the paths together give map root %s, not %s", r, st.Root)
	}
	paths := make(map[Hash]bool, len(st.Paths))
	for _, p := range st.Paths {
		paths[p.Key] = true
	}
	for i, cs := range st.Changes {
		for _, c := range cs {
			if !paths[c.Key] {
				return nil, fmt.Errorf("no path for key %.12s, which entry %d changes", c.Key, st.From+1+int64(i))
			}
		}
	}
	return m, nil
}

func isStub(n mapNode) bool { _, ok := n.(*mapStub); return ok }

// rehashAll recomputes the hashes of the inner nodes of the subtree n at
// depth d and returns its hash.
func rehashAll(n mapNode, d int) Hash {
	switch x := n.(type) {
	case nil:
		return emptyHashes[d]
	case *mapInner:
		rehashAll(x.kids[0], d+1)
		rehashAll(x.kids[1], d+1)
		x.rehash(d)
	}
	return *n.nodeHash()
}

// Marshal returns the encoding of st:
//
//	magic "SPDLM1", From, To (uint64 each), Root,
//	entries (uint32), and for each its changes (uint32) and each change:
//	  flags (1 HadOld, 2 HasNew, 4 Name), Key, Old if HadOld, New if
//	  HasNew, Name (uint32 length and bytes) if flagged,
//	paths (uint32), each: Key, present (1 byte), Val if present, the
//	  proof (uint32 length and MapProof.Marshal),
//	leaves (uint32), each: depth (uint16), Key, Val.
func (st *MapStep) Marshal() []byte {
	b := append([]byte(nil), mapStepMagic...)
	b = binary.BigEndian.AppendUint64(b, uint64(st.From))
	b = binary.BigEndian.AppendUint64(b, uint64(st.To))
	b = append(b, st.Root[:]...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(st.Changes)))
	for _, cs := range st.Changes {
		b = binary.BigEndian.AppendUint32(b, uint32(len(cs)))
		for _, c := range cs {
			var f byte
			if c.HadOld {
				f |= 1
			}
			if c.HasNew {
				f |= 2
			}
			if c.Name != "" {
				f |= 4
			}
			b = append(b, f)
			b = append(b, c.Key[:]...)
			if c.HadOld {
				b = append(b, c.Old[:]...)
			}
			if c.HasNew {
				b = append(b, c.New[:]...)
			}
			if c.Name != "" {
				b = appendString(b, string(c.Name))
			}
		}
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(st.Paths)))
	for _, p := range st.Paths {
		b = append(b, p.Key[:]...)
		if p.Present {
			b = append(b, 1)
			b = append(b, p.Val[:]...)
		} else {
			b = append(b, 0)
		}
		b = appendString(b, string(p.Proof.Marshal()))
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(st.Leaves)))
	for _, l := range st.Leaves {
		b = binary.BigEndian.AppendUint16(b, uint16(l.Depth))
		b = append(b, l.Key[:]...)
		b = append(b, l.Val[:]...)
	}
	return b
}

// UnmarshalMapStep decodes a map step encoded by [MapStep.Marshal]. A
// malformed one is Invalid.
func UnmarshalMapStep(data []byte) (*MapStep, error) {
	const op spindle.Op = "dirlog.UnmarshalMapStep"
	st, err := decodeMapStep(data)
	if err != nil {
		return nil, spindle.E(op, spindle.Invalid, fmt.Errorf("malformed map step: %w", err))
	}
	return st, nil
}

func decodeMapStep(data []byte) (*MapStep, error) {
	d := decoder{b: data}
	if string(d.take(len(mapStepMagic), "magic")) != mapStepMagic {
		d.fail("bad magic")
	}
	st := &MapStep{From: int64(d.u64("from")), To: int64(d.u64("to"))}
	copy(st.Root[:], d.take(len(st.Root), "root"))
	if d.err == nil && (st.From < 0 || st.To < st.From || st.To-st.From > MapStepWindow) {
		d.fail("entries %d to %d", st.From+1, st.To)
	}
	// Every count is checked against the bytes left, each item taking at
	// least min bytes, so that no count allocates more than the input.
	count := func(min int, what string) int {
		n := int(d.u32(what))
		if d.err == nil && n > len(d.b)/min {
			d.fail("%d %s in %d bytes", n, what, len(d.b))
		}
		if d.err != nil {
			return 0
		}
		return n
	}
	n := count(4, "entries")
	if d.err == nil && int64(n) != st.To-st.From {
		d.fail("%d lists of changes for entries %d to %d", n, st.From+1, st.To)
	}
	total := 0
	for i := 0; i < n && d.err == nil; i++ {
		k := count(33, "changes")
		if total += k; total > maxMapStepChanges {
			d.fail("more than %d changes", maxMapStepChanges)
		}
		cs := make([]MapChange, 0, k)
		for j := 0; j < k && d.err == nil; j++ {
			var c MapChange
			f := d.u8("flags")
			if f&^7 != 0 {
				d.fail("change flags %#x", f)
			}
			c.HadOld, c.HasNew = f&1 != 0, f&2 != 0
			copy(c.Key[:], d.take(32, "key"))
			if c.HadOld {
				copy(c.Old[:], d.take(32, "old value"))
			}
			if c.HasNew {
				copy(c.New[:], d.take(32, "new value"))
			}
			if f&4 != 0 {
				c.Name = spindle.PathName(d.string(MaxNameLen, "name"))
				if d.err == nil && c.Name == "" {
					d.fail("empty name")
				}
			}
			cs = append(cs, c)
		}
		st.Changes = append(st.Changes, cs)
	}
	n = count(37, "paths")
	for i := 0; i < n && d.err == nil; i++ {
		var p MapPath
		copy(p.Key[:], d.take(32, "path key"))
		switch d.u8("present") {
		case 0:
		case 1:
			p.Present = true
			copy(p.Val[:], d.take(32, "path value"))
		default:
			d.fail("present flag")
		}
		raw := d.bytes(MaxMapProof, "proof")
		if d.err == nil {
			proof, err := decodeMapProof(raw)
			if err != nil {
				d.fail("path %d: %v", i, err)
			}
			p.Proof = proof
		}
		st.Paths = append(st.Paths, p)
	}
	n = count(66, "leaves")
	for i := 0; i < n && d.err == nil; i++ {
		var l MapLeaf
		if b := d.take(2, "depth"); b != nil {
			l.Depth = int(binary.BigEndian.Uint16(b))
		}
		copy(l.Key[:], d.take(32, "leaf key"))
		copy(l.Val[:], d.take(32, "leaf value"))
		st.Leaves = append(st.Leaves, l)
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d bytes after the end", len(d.b))
	}
	return st, d.err
}
