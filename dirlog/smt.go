package dirlog

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"sort"
	"strings"

	"spindle.dev"
)

// # The tree map
//
// Each log's folded tree is also held as an authenticated map, a sparse
// Merkle tree of depth 256, so that a head can commit to the whole tree
// with one hash (Head.Root) and a host can prove to a reader what the tree
// holds, or does not hold, at a name.
//
// Keys and values:
//   - The key of an item is [MapKey] of its name: the SHA-256 of a context
//     string and the clean path name. Bit 0 (the high bit of byte 0) picks
//     the root's child, bit 1 the next, and so on.
//   - The value of a file, link or directory is the [Hash] of the signed
//     log entry that put it there: the put, link or mkdir. A put over a
//     file replaces the value.
//   - A delete removes the key: the map holds exactly the items of the
//     tree, so a missing name has an exclusion proof.
//   - A rename moves every item of the moved subtree (the item itself and,
//     for a directory, everything below it) to its new name, with the value
//     [MovedValue](rename entry's hash, old value). An item's value thus
//     chains the entry that wrote it and every rename that moved it since,
//     each of which is signed by its writer, so a reader given those
//     entries can check the value.
//
// The map's shape is a function of its keys alone (it is canonical), so its
// root at sequence N depends only on the log up to N, never on the order of
// work inside the server or on how appends were batched:
//   - an empty subtree at depth d hashes to a per-depth constant,
//     emptyHashes[d] (depth 0 is the root, 256 the leaves' level);
//   - a subtree that holds exactly one item is that item's leaf, placed at
//     the top of the subtree (not at depth 256), hashed with its depth,
//     key and value;
//   - any other subtree is an inner node, hashing its two children.
//
// Hashes are domain-separated from each other and from every other hash
// in Spindle by distinct context strings (mapKeyContext and the others
// below); each is at most 55 bytes, so inner and leaf hashes cost two
// SHA-256 blocks. With n items, a path has about log2(n) nodes, so an
// update costs about log2(n)+2 hashes, and a proof carries about log2(n)
// sibling hashes. This is the compact sparse Merkle tree of Diem's
// Jellyfish tree and of Dahlberg, Pulls and Peeters ("Efficient Sparse
// Merkle Trees", 2016), which also hash a leaf's position into it.
//
// Proofs carry hashes only: the keys are hashes of names, so a proof
// reveals no name, though one who can guess a name can test a key against
// it (names are told only to users with rights on them in any case).

const (
	mapKeyContext   = "spindle.dev/dirlog map key v1\n"
	mapLeafContext  = "spindle.dev/dirlog map leaf v1\n"
	mapInnerContext = "spindle.dev/dirlog map inner v1\n"
	mapEmptyContext = "spindle.dev/dirlog map empty v1\n"
	mapMovedContext = "spindle.dev/dirlog map moved v1\n"

	// MapDepth is the depth of the tree map: one level per bit of a key.
	MapDepth = 256
)

// emptyHashes[d] is the hash of an empty subtree whose top is at depth d.
var emptyHashes = func() (e [MapDepth + 1]Hash) {
	for d := range e {
		var b [len(mapEmptyContext) + 2]byte
		copy(b[:], mapEmptyContext)
		binary.BigEndian.PutUint16(b[len(mapEmptyContext):], uint16(d))
		e[d] = sha256.Sum256(b[:])
	}
	return e
}()

// MapKey returns the key of name in the tree map: the SHA-256 of a context
// string and the name, which must be clean.
func MapKey(name spindle.PathName) Hash {
	h := sha256.New()
	h.Write([]byte(mapKeyContext))
	h.Write([]byte(name))
	var k Hash
	h.Sum(k[:0])
	return k
}

// MovedValue returns the value in the tree map of an item with value old
// after the rename entry whose hash is rename moved it.
func MovedValue(rename, old Hash) Hash {
	var b [len(mapMovedContext) + 64]byte
	n := copy(b[:], mapMovedContext)
	n += copy(b[n:], rename[:])
	copy(b[n:], old[:])
	return sha256.Sum256(b[:])
}

// leafHash is the hash of a subtree at depth d holding only key, with val.
func leafHash(d int, key, val *Hash) Hash {
	var b [len(mapLeafContext) + 2 + 64]byte
	n := copy(b[:], mapLeafContext)
	binary.BigEndian.PutUint16(b[n:], uint16(d))
	n += 2
	n += copy(b[n:], key[:])
	copy(b[n:], val[:])
	return sha256.Sum256(b[:])
}

// innerHash is the hash of a subtree whose children hash to l and r.
func innerHash(l, r *Hash) Hash {
	var b [len(mapInnerContext) + 64]byte
	n := copy(b[:], mapInnerContext)
	n += copy(b[n:], l[:])
	copy(b[n:], r[:])
	return sha256.Sum256(b[:])
}

// bit returns bit d of key: 0 sends a path left, 1 right.
func bit(key *Hash, d int) int {
	return int(key[d/8]>>(7-d%8)) & 1
}

// A treeMap is the authenticated map of one tree. It is not safe for
// concurrent use; its tree's guard covers it. The zero value is empty.
type treeMap struct {
	root mapNode // Nil if empty.
	n    int     // Items held.
	// missing is set when a change or a lookup reached a subtree known
	// only by its hash (a mapStub, in a map grafted from proofs; see
	// CheckMapStep): its result is not to be trusted.
	missing bool
}

// A mapNode is a *mapLeaf or a *mapInner. Its depth is implicit in where
// it is. Two types, so that an inner node carries no key and value: a map
// of n random keys has about 1.44n inner nodes.
type mapNode interface{ nodeHash() *Hash }

// A mapLeaf is a subtree that holds exactly one item.
type mapLeaf struct{ hash, key, val Hash }

// A mapInner is a subtree that holds at least two items.
type mapInner struct {
	hash Hash
	kids [2]mapNode // Nil is an empty subtree.
}

// A mapStub is a subtree known only by its hash, in a map grafted from
// proofs (see CheckMapStep). It holds at least one item; one that holds
// exactly one is given as its leaf instead.
type mapStub struct{ hash Hash }

func (l *mapLeaf) nodeHash() *Hash  { return &l.hash }
func (n *mapInner) nodeHash() *Hash { return &n.hash }
func (s *mapStub) nodeHash() *Hash  { return &s.hash }

// childHash returns the hash of c, a subtree at depth d.
func childHash(c mapNode, d int) *Hash {
	if c == nil {
		return &emptyHashes[d]
	}
	return c.nodeHash()
}

// rehash recomputes the hash of n at depth d from its children.
func (n *mapInner) rehash(d int) {
	n.hash = innerHash(childHash(n.kids[0], d+1), childHash(n.kids[1], d+1))
}

// place recomputes the hash of l as a leaf at depth d.
func (l *mapLeaf) place(d int) *mapLeaf {
	l.hash = leafHash(d, &l.key, &l.val)
	return l
}

// Root returns the map's root hash.
func (m *treeMap) Root() Hash { return *childHash(m.root, 0) }

// Len returns the number of items in the map.
func (m *treeMap) Len() int { return m.n }

// Get returns the value of key and whether it is present.
func (m *treeMap) Get(key Hash) (Hash, bool) {
	n := m.root
	for d := 0; n != nil; d++ {
		switch x := n.(type) {
		case *mapLeaf:
			if x.key == key {
				return x.val, true
			}
			return Hash{}, false
		case *mapInner:
			n = x.kids[bit(&key, d)]
		case *mapStub:
			m.missing = true
			return Hash{}, false
		}
	}
	return Hash{}, false
}

// Set sets the value of key, adding it if it is absent.
func (m *treeMap) Set(key, val Hash) { m.root = m.set(m.root, 0, &key, &val) }

func (m *treeMap) set(n mapNode, d int, key, val *Hash) mapNode {
	switch x := n.(type) {
	case nil:
		m.n++
		return (&mapLeaf{key: *key, val: *val}).place(d)
	case *mapLeaf:
		if x.key == *key {
			x.val = *val
			return x.place(d)
		}
		m.n++
		return split(x, &mapLeaf{key: *key, val: *val}, d)
	case *mapInner:
		b := bit(key, d)
		x.kids[b] = m.set(x.kids[b], d+1, key, val)
		x.rehash(d)
	case *mapStub:
		m.missing = true
	}
	return n
}

// split returns the subtree at depth d that holds leaves a and b, which
// have different keys: a chain of inner nodes with one child down to the
// first bit where the keys differ, and there a node with both leaves.
func split(a, b *mapLeaf, d int) mapNode {
	p := d
	for bit(&a.key, p) == bit(&b.key, p) {
		p++
	}
	n := &mapInner{}
	n.kids[bit(&a.key, p)], n.kids[bit(&b.key, p)] = a.place(p+1), b.place(p+1)
	n.rehash(p)
	for q := p - 1; q >= d; q-- {
		up := &mapInner{}
		up.kids[bit(&a.key, q)] = n
		up.rehash(q)
		n = up
	}
	return n
}

// Delete removes key, if it is present.
func (m *treeMap) Delete(key Hash) {
	if n, changed := m.del(m.root, 0, &key); changed {
		m.root = n
	}
}

// del removes key from the subtree n at depth d and returns the subtree
// that replaces it, and whether anything changed. A subtree left with one
// item becomes that item's leaf, which rises to the subtree's top.
func (m *treeMap) del(n mapNode, d int, key *Hash) (mapNode, bool) {
	switch x := n.(type) {
	case *mapLeaf:
		if x.key != *key {
			return n, false
		}
		m.n--
		return nil, true
	case *mapInner:
		b := bit(key, d)
		c, changed := m.del(x.kids[b], d+1, key)
		if !changed {
			return n, false
		}
		x.kids[b] = c
		if o, ok := x.kids[1-b].(*mapLeaf); ok && c == nil {
			return o.place(d), true
		}
		if l, ok := c.(*mapLeaf); ok && x.kids[1-b] == nil {
			return l.place(d), true
		}
		x.rehash(d)
		return n, true
	case *mapStub:
		m.missing = true
		return n, false
	}
	return nil, false
}

// Prove returns the proof of what the map holds at key: an inclusion
// proof if key is present, an exclusion proof otherwise.
func (m *treeMap) Prove(key Hash) *MapProof {
	p := &MapProof{End: EndEmpty}
	n := m.root
	for d := 0; n != nil; d++ {
		switch x := n.(type) {
		case *mapLeaf:
			if x.key == key {
				p.End = EndIncluded
			} else {
				p.End, p.LeafKey, p.LeafValue = EndOtherLeaf, x.key, x.val
			}
			return p
		case *mapInner:
			b := bit(&key, d)
			var sib Hash // Zero: empty.
			if o := x.kids[1-b]; o != nil {
				sib = *o.nodeHash()
			}
			p.Siblings = append(p.Siblings, sib)
			n = x.kids[b]
		}
	}
	return p
}

// MapRoot returns the root of the tree map after entries, the whole of a
// log from its first entry, each of which must be valid (see [Audit]): it
// is what [host.Server.Head] signs as Head.Root after the last of them. It
// folds the log anew, without the server's tree, so that an owner, a
// mirror or an auditor can check a head with it. It checks only that the
// entries are chained (sequence numbers and hashes); an error is Invalid.
func MapRoot(entries []*Entry) (Hash, error) {
	const op spindle.Op = "dirlog.MapRoot"
	root, _, err := foldMap(make(map[spindle.PathName]Hash), 0, Hash{}, entries)
	if err != nil {
		return Hash{}, spindle.E(op, err)
	}
	return root, nil
}

// foldMap applies entries, which must follow entry seq with hash prev, to
// vals, the tree map's values by name after seq, and returns the map's
// root and the last entry's hash. An error is Invalid.
func foldMap(vals map[spindle.PathName]Hash, seq int64, prev Hash, entries []*Entry) (Hash, Hash, error) {
	for i, e := range entries {
		if e.Seq != seq+int64(i+1) || e.Prev != prev {
			return Hash{}, Hash{}, spindle.E(spindle.Invalid, e.Entry.Name, fmt.Sprintf("entries do not form a log from entry %d: entry %d has sequence %d after %.12s", seq+1, seq+int64(i+1), e.Seq, e.Prev))
		}
		h := e.Hash()
		name := e.Entry.Name
		switch e.Op {
		case OpPut, OpLink, OpMkdir:
			vals[name] = h
		case OpDelete:
			delete(vals, name)
		case OpRename:
			moved := make(map[spindle.PathName]Hash)
			for n, v := range vals {
				if n == name || strings.HasPrefix(string(n), string(name)+"/") {
					moved[e.NewName+n[len(name):]] = MovedValue(h, v)
					delete(vals, n)
				}
			}
			for n, v := range moved {
				vals[n] = v
			}
		}
		prev = h
	}
	items := make([]mapItem, 0, len(vals))
	for n, v := range vals {
		items = append(items, mapItem{MapKey(n), v})
	}
	sort.Slice(items, func(i, j int) bool { return string(items[i].key[:]) < string(items[j].key[:]) })
	return buildRoot(items, 0), prev, nil
}

type mapItem struct{ key, val Hash }

// buildRoot returns the hash of the subtree at depth d holding items,
// sorted by key, all of which share their first d bits. It follows the
// definition of the map's hashes directly, so that it checks the
// incremental treeMap.
func buildRoot(items []mapItem, d int) Hash {
	switch len(items) {
	case 0:
		return emptyHashes[d]
	case 1:
		return leafHash(d, &items[0].key, &items[0].val)
	}
	i := sort.Search(len(items), func(i int) bool { return bit(&items[i].key, d) == 1 })
	l, r := buildRoot(items[:i], d+1), buildRoot(items[i:], d+1)
	return innerHash(&l, &r)
}
