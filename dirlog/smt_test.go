package dirlog

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"

	"spindle.dev"
)

// rootOf computes the root of a map holding vals with buildRoot, the
// direct definition.
func rootOf(vals map[Hash]Hash) Hash {
	items := make([]mapItem, 0, len(vals))
	for k, v := range vals {
		items = append(items, mapItem{k, v})
	}
	sort.Slice(items, func(i, j int) bool { return bytes.Compare(items[i].key[:], items[j].key[:]) < 0 })
	return buildRoot(items, 0)
}

func testHash(s string) Hash { return sha256.Sum256([]byte(s)) }

// TestMapIncremental checks, after every one of many random sets and
// deletes, that the incrementally kept root equals the root built from
// the map's contents, and that Get and Len agree with them.
func TestMapIncremental(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var m treeMap
	want := make(map[Hash]Hash)
	keys := make([]Hash, 300)
	for i := range keys {
		keys[i] = testHash(fmt.Sprint("key", i))
	}
	for step := 0; step < 3000; step++ {
		k := keys[rng.IntN(len(keys))]
		if rng.IntN(3) == 0 {
			m.Delete(k)
			delete(want, k)
		} else {
			v := testHash(fmt.Sprint("value", step))
			m.Set(k, v)
			want[k] = v
		}
		if got, w := m.Root(), rootOf(want); got != w {
			t.Fatalf("step %d: root %s, want %s", step, got, w)
		}
		if m.Len() != len(want) {
			t.Fatalf("step %d: len %d, want %d", step, m.Len(), len(want))
		}
	}
	for _, k := range keys {
		v, ok := m.Get(k)
		if w, wok := want[k]; ok != wok || (ok && v != w) {
			t.Fatalf("Get(%s) = %s, %v; want %s, %v", k, v, ok, w, wok)
		}
	}
	for k := range want {
		m.Delete(k)
	}
	if m.root != nil || m.Len() != 0 || m.Root() != emptyHashes[0] {
		t.Fatalf("map not empty after deleting everything: %d items, root %s", m.Len(), m.Root())
	}
}

// TestMapOrder checks that the root depends on the contents only, not on
// the order in which they were set.
func TestMapOrder(t *testing.T) {
	var a, b treeMap
	for i := 0; i < 200; i++ {
		a.Set(testHash(fmt.Sprint(i)), testHash(fmt.Sprint("v", i)))
	}
	for i := 199; i >= 0; i-- {
		b.Set(testHash(fmt.Sprint(i)), testHash(fmt.Sprint("old", i)))
		b.Set(testHash(fmt.Sprint(1000+i)), testHash("gone"))
	}
	for i := 0; i < 200; i++ {
		b.Set(testHash(fmt.Sprint(i)), testHash(fmt.Sprint("v", i)))
		b.Delete(testHash(fmt.Sprint(1000 + i)))
	}
	if a.Root() != b.Root() {
		t.Fatalf("same contents, different roots: %s, %s", a.Root(), b.Root())
	}
}

// TestMapDomains checks that the hashes of the map are separated from
// each other: an empty subtree, a leaf and an inner node never coincide.
func TestMapDomains(t *testing.T) {
	k, v := testHash("k"), testHash("v")
	seen := map[Hash]string{}
	add := func(h Hash, what string) {
		if prev, ok := seen[h]; ok {
			t.Fatalf("%s and %s hash alike", what, prev)
		}
		seen[h] = what
	}
	for d := 0; d <= MapDepth; d++ {
		add(emptyHashes[d], fmt.Sprint("empty ", d))
	}
	add(leafHash(0, &k, &v), "leaf 0")
	add(leafHash(1, &k, &v), "leaf 1")
	add(innerHash(&k, &v), "inner")
	add(MovedValue(k, v), "moved")
	add(MapKey(spindle.PathName(k[:])), "key")
}

// keyWithBits returns a key whose first bits are those of prefix, a string
// of 0s and 1s, and whose other bits are zero.
func keyWithBits(prefix string) Hash {
	var k Hash
	for i, c := range prefix {
		if c == '1' {
			k[i/8] |= 0x80 >> (i % 8)
		}
	}
	return k
}

// proveAndCheck proves every key in keys and absent against m, round trips
// each proof through its encoding, and checks that it verifies as it should
// and not as the opposite. It returns the ends seen.
func proveAndCheck(t *testing.T, m *treeMap, present map[Hash]Hash, absent []Hash) map[ProofEnd]int {
	t.Helper()
	root := m.Root()
	ends := map[ProofEnd]int{}
	check := func(k Hash) {
		p := m.Prove(k)
		enc := p.Marshal()
		q, err := UnmarshalMapProof(enc)
		if err != nil {
			t.Fatalf("key %s: %v", k, err)
		}
		if !bytes.Equal(q.Marshal(), enc) {
			t.Fatalf("key %s: proof does not round trip", k)
		}
		ends[q.End]++
		if v, ok := present[k]; ok {
			if err := q.VerifyIncluded(root, k, v); err != nil {
				t.Fatalf("key %s: %v", k, err)
			}
			wantKind(t, q.VerifyAbsent(root, k), spindle.Integrity, "absence of a present key")
			wantKind(t, q.VerifyIncluded(root, k, testHash("other value")), spindle.Integrity, "inclusion with another value")
			return
		}
		if err := q.VerifyAbsent(root, k); err != nil {
			t.Fatalf("key %s: %v", k, err)
		}
		wantKind(t, q.VerifyIncluded(root, k, Hash{}), spindle.Integrity, "inclusion of an absent key")
	}
	for k := range present {
		check(k)
	}
	for _, k := range absent {
		check(k)
	}
	return ends
}

func TestMapProofs(t *testing.T) {
	var m treeMap
	proveAndCheck(t, &m, nil, []Hash{testHash("a")}) // Empty map.
	m.Set(testHash("a"), testHash("va"))
	proveAndCheck(t, &m, map[Hash]Hash{testHash("a"): testHash("va")}, []Hash{testHash("b")})

	present := map[Hash]Hash{}
	for i := 0; i < 1000; i++ {
		k, v := testHash(fmt.Sprint("k", i)), testHash(fmt.Sprint("v", i))
		m.Set(k, v)
		present[k] = v
	}
	m.Delete(testHash("a"))
	var absent []Hash
	for i := 0; i < 1000; i++ {
		absent = append(absent, testHash(fmt.Sprint("absent", i)))
	}
	ends := proveAndCheck(t, &m, present, absent)
	if ends[EndIncluded] != len(present) || ends[EndEmpty] == 0 || ends[EndOtherLeaf] == 0 {
		t.Fatalf("proofs ended at %v; want every kind of end", ends)
	}
}

// TestMapDeepKeys checks keys that differ only in their last bits, whose
// leaves lie at depth 256, and the chains of one-child nodes above them.
func TestMapDeepKeys(t *testing.T) {
	zeros := func(n int) string { return string(bytes.Repeat([]byte("0"), n)) }
	a := keyWithBits(zeros(256))
	b := keyWithBits(zeros(255) + "1")
	c := keyWithBits(zeros(254) + "1")
	d := keyWithBits("1")
	var m treeMap
	present := map[Hash]Hash{a: testHash("a"), b: testHash("b"), d: testHash("d")}
	for k, v := range present {
		m.Set(k, v)
	}
	if p := m.Prove(a); len(p.Siblings) != MapDepth {
		t.Fatalf("proof of a has %d siblings, want %d", len(p.Siblings), MapDepth)
	}
	if p := m.Prove(c); p.End != EndEmpty || len(p.Siblings) != MapDepth-1 {
		t.Fatalf("proof of c ends at %s after %d siblings, want an empty subtree after %d", p.End, len(p.Siblings), MapDepth-1)
	}
	ends := proveAndCheck(t, &m, present, []Hash{c, keyWithBits("01")})
	if ends[EndEmpty] != 2 {
		t.Fatalf("ends %v", ends)
	}
	if got, want := len(m.Prove(a).Marshal()), MaxMapProof-64-32*(MapDepth-2); got != want {
		t.Fatalf("deep proof is %d bytes, want %d", got, want)
	}
	m.Delete(b)
	if m.Root() != rootOf(map[Hash]Hash{a: testHash("a"), d: testHash("d")}) {
		t.Fatal("root after deleting a deep key is wrong")
	}
	if p := m.Prove(a); len(p.Siblings) != 1 {
		t.Fatalf("leaf did not rise: proof has %d siblings", len(p.Siblings))
	}
}

// TestMapProofTampered checks that changing any part of a proof, or the
// key or value it is checked with, makes it fail: each byte of the
// encoding (the siblings, the bitmap, the depth, the end, another leaf's
// key and value), each sibling in memory, and the key and value.
func TestMapProofTampered(t *testing.T) {
	var m treeMap
	for i := 0; i < 500; i++ {
		m.Set(testHash(fmt.Sprint("k", i)), testHash(fmt.Sprint("v", i)))
	}
	root := m.Root()
	key, val := testHash("k7"), testHash("v7")
	var other, empty Hash // Absent keys whose proofs end at another leaf, at an empty subtree.
	for i := 0; other.IsZero() || empty.IsZero(); i++ {
		k := testHash(fmt.Sprint("absent", i))
		switch m.Prove(k).End {
		case EndOtherLeaf:
			other = k
		case EndEmpty:
			empty = k
		}
	}
	type tc struct {
		name   string
		key    Hash
		verify func(p *MapProof, k Hash) error
	}
	cases := []tc{
		{"inclusion", key, func(p *MapProof, k Hash) error { return p.VerifyIncluded(root, k, val) }},
		{"exclusion at another leaf", other, func(p *MapProof, k Hash) error { return p.VerifyAbsent(root, k) }},
		{"exclusion at an empty subtree", empty, func(p *MapProof, k Hash) error { return p.VerifyAbsent(root, k) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := m.Prove(c.key)
			if err := c.verify(p, c.key); err != nil {
				t.Fatal(err)
			}
			enc := p.Marshal()
			for i := range enc {
				for _, mask := range []byte{0x01, 0x80, 0xff} {
					bad := bytes.Clone(enc)
					bad[i] ^= mask
					q, err := UnmarshalMapProof(bad)
					if err == nil {
						err = c.verify(q, c.key)
					}
					if err == nil {
						t.Fatalf("byte %d of %d xor %#x: tampered proof verifies", i, len(enc), mask)
					}
				}
			}
			for i := range p.Siblings {
				q := *p
				q.Siblings = append([]Hash(nil), p.Siblings...)
				if q.Siblings[i].IsZero() {
					q.Siblings[i] = testHash("not empty")
				} else {
					q.Siblings[i][31] ^= 1
				}
				if c.verify(&q, c.key) == nil {
					t.Fatalf("sibling %d changed: proof verifies", i)
				}
			}
			if p.End == EndOtherLeaf {
				q := *p
				q.LeafValue[0] ^= 1
				wantKind(t, c.verify(&q, c.key), spindle.Integrity, "other leaf's value changed")
				q = *p
				q.LeafKey[31] ^= 1
				wantKind(t, c.verify(&q, c.key), spindle.Integrity, "other leaf's key changed")
			}
			// Bits of the key on the path matter; below the path's end,
			// another key is absent by the same proof, as it should be.
			bitsOn := []int{0, len(p.Siblings) / 2, len(p.Siblings) - 1}
			if p.End == EndIncluded {
				bitsOn = append(bitsOn, 100, 255)
			}
			for _, b := range bitsOn {
				k := c.key
				k[b/8] ^= 0x80 >> (b % 8)
				if c.verify(p, k) == nil {
					t.Fatalf("key bit %d changed: proof verifies", b)
				}
			}
			if c.verify(p, c.key) != nil {
				t.Fatal("proof changed by the checks")
			}
			short := *p
			short.Siblings = p.Siblings[:len(p.Siblings)-1]
			if c.verify(&short, c.key) == nil {
				t.Fatal("proof without its last sibling verifies")
			}
		})
	}
	wrongVal := val
	wrongVal[5] ^= 4
	wantKind(t, m.Prove(key).VerifyIncluded(root, key, wrongVal), spindle.Integrity, "value changed")
	wantKind(t, m.Prove(key).VerifyIncluded(testHash("another root"), key, val), spindle.Integrity, "another root")
}

// TestMapProofDecoding checks that the decoder refuses what the encoder
// never makes.
func TestMapProofDecoding(t *testing.T) {
	var m treeMap
	for i := 0; i < 50; i++ {
		m.Set(testHash(fmt.Sprint("k", i)), testHash(fmt.Sprint("v", i)))
	}
	good := m.Prove(testHash("k1")).Marshal()
	emptySib := m.Prove(testHash("k1"))
	emptySib.Siblings = append(emptySib.Siblings, emptyHashes[len(emptySib.Siblings)+1])
	lastEmpty := m.Prove(testHash("k1"))
	lastEmpty.Siblings = append(lastEmpty.Siblings, Hash{})
	deepEmpty := &MapProof{End: EndEmpty, Siblings: make([]Hash, MapDepth)}
	for i := range deepEmpty.Siblings {
		deepEmpty.Siblings[i] = testHash("s")
	}
	bad := map[string][]byte{
		"empty":                  nil,
		"version 2":              append([]byte{2}, good[1:]...),
		"end 0":                  append([]byte{1, 0}, good[2:]...),
		"end 4":                  append([]byte{1, 4}, good[2:]...),
		"trailing byte":          append(bytes.Clone(good), 0),
		"truncated":              good[:len(good)-1],
		"header only":            good[:4],
		"depth 257":              {1, 1, 1, 1},
		"empty sibling given":    emptySib.Marshal(),
		"empty beside the end":   lastEmpty.Marshal(),
		"empty end at depth 256": deepEmpty.Marshal(),
		"too long":               make([]byte, MaxMapProof+1),
	}
	// A padding bit set in the bitmap: depth 3, bitmap 0b1110_0000 plus a
	// stray bit.
	pad := (&MapProof{End: EndIncluded, Siblings: []Hash{testHash("1"), testHash("2"), testHash("3")}}).Marshal()
	pad[4] |= 1
	bad["padding bit"] = append(pad, bytes.Repeat([]byte{1}, 32)...)
	for name, b := range bad {
		if _, err := UnmarshalMapProof(b); err == nil {
			t.Errorf("%s: decoded", name)
		} else {
			wantKind(t, err, spindle.Invalid, name)
		}
	}
}

// FuzzProof checks that the proof decoder never panics, never accepts more
// than MaxMapProof bytes, and accepts only canonical encodings: whatever it
// decodes encodes back to the same bytes. Verifying what it decodes must
// not panic either.
func FuzzProof(f *testing.F) {
	var m treeMap
	for i := 0; i < 20; i++ {
		m.Set(testHash(fmt.Sprint("k", i)), testHash(fmt.Sprint("v", i)))
	}
	f.Add(m.Prove(testHash("k3")).Marshal())
	for i := 0; i < 40; i++ {
		f.Add(m.Prove(testHash(fmt.Sprint("absent", i))).Marshal())
	}
	f.Add((&treeMap{}).Prove(testHash("x")).Marshal())
	root := m.Root()
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := UnmarshalMapProof(data)
		if err != nil {
			if spindle.KindOf(err) != spindle.Invalid {
				t.Fatalf("error of kind %v: %v", spindle.KindOf(err), err)
			}
			return
		}
		if len(data) > MaxMapProof || len(p.Siblings) > MapDepth {
			t.Fatal("limits exceeded")
		}
		if !bytes.Equal(p.Marshal(), data) {
			t.Fatalf("not canonical: %x re-encodes as %x", data, p.Marshal())
		}
		_ = p.VerifyIncluded(root, testHash("k3"), testHash("v3"))
		_ = p.VerifyAbsent(root, testHash("absent0"))
	})
}
