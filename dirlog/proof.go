package dirlog

import (
	"encoding/binary"
	"fmt"
	"math/bits"

	"spindle.dev"
)

// A ProofEnd says where the path of a [MapProof] ends.
type ProofEnd uint8

// The ends of a proof's path. The numbers are part of the encoding.
const (
	EndIncluded  ProofEnd = 1 // At the key's own leaf: the key is present.
	EndEmpty     ProofEnd = 2 // At an empty subtree: the key is absent.
	EndOtherLeaf ProofEnd = 3 // At the leaf of another key: the key is absent.
)

// A MapProof proves, against a root of the tree map (see [MapKey]), that a
// key maps to a value (an inclusion proof) or that it is absent (an
// exclusion proof). It holds the hashes beside the key's path from the
// root down to where the path ends, and nothing that names an item.
type MapProof struct {
	// Siblings[i] is the hash of the subtree beside the path at depth
	// i+1; the zero Hash stands for an empty subtree.
	Siblings []Hash
	End      ProofEnd
	// LeafKey and LeafValue are the key and value of the leaf where the
	// path ends, for EndOtherLeaf only.
	LeafKey, LeafValue Hash
}

// Limits of an encoded proof.
const (
	mapProofVersion = 1
	// MaxMapProof is the size of the largest encoded proof: a header, a
	// full bitmap, 256 siblings and another leaf's key and value.
	MaxMapProof = 4 + MapDepth/8 + MapDepth*32 + 64
)

// Marshal returns the canonical encoding of the proof:
//
//	version (1 byte, 1), end (1 byte), depth D (uint16, big-endian),
//	bitmap of ceil(D/8) bytes: bit i (high bit first) set if Siblings[i]
//	  is not empty; unused bits zero,
//	the hashes of the non-empty siblings, 32 bytes each, root first,
//	for EndOtherLeaf: LeafKey, LeafValue.
//
// [UnmarshalMapProof] accepts exactly the encodings Marshal produces from
// the proofs a map makes.
func (p *MapProof) Marshal() []byte {
	b := make([]byte, 0, 4+(len(p.Siblings)+7)/8+32*len(p.Siblings)+64)
	b = append(b, mapProofVersion, byte(p.End))
	b = binary.BigEndian.AppendUint16(b, uint16(len(p.Siblings)))
	bitmap := make([]byte, (len(p.Siblings)+7)/8)
	for i, s := range p.Siblings {
		if !s.IsZero() {
			bitmap[i/8] |= 0x80 >> (i % 8)
		}
	}
	b = append(b, bitmap...)
	for _, s := range p.Siblings {
		if !s.IsZero() {
			b = append(b, s[:]...)
		}
	}
	if p.End == EndOtherLeaf {
		b = append(b, p.LeafKey[:]...)
		b = append(b, p.LeafValue[:]...)
	}
	return b
}

// UnmarshalMapProof decodes a proof encoded by [MapProof.Marshal], from
// bytes that need not be trusted. It accepts only the shortest, canonical
// form of a proof a map could make: at most MaxMapProof bytes, a known end,
// a sibling given only if it is not empty (and not the hash of an empty
// subtree), a non-empty sibling beside the path's end (a subtree with one
// item is its leaf), no trailing bytes. It does not verify the proof (see
// [MapProof.VerifyIncluded] and [MapProof.VerifyAbsent]). Errors are
// Invalid.
func UnmarshalMapProof(data []byte) (*MapProof, error) {
	const op spindle.Op = "dirlog.UnmarshalMapProof"
	p, err := decodeMapProof(data)
	if err != nil {
		return nil, spindle.E(op, spindle.Invalid, fmt.Errorf("malformed map proof: %w", err))
	}
	return p, nil
}

func decodeMapProof(data []byte) (*MapProof, error) {
	if len(data) > MaxMapProof {
		return nil, fmt.Errorf("%d bytes, limit is %d", len(data), MaxMapProof)
	}
	d := decoder{b: data}
	if v := d.u8("version"); d.err == nil && v != mapProofVersion {
		return nil, fmt.Errorf("unknown version %d", v)
	}
	p := &MapProof{End: ProofEnd(d.u8("end"))}
	var depth int
	if b := d.take(2, "depth"); b != nil {
		depth = int(binary.BigEndian.Uint16(b))
	}
	bitmap := d.take((depth+7)/8, "bitmap")
	if d.err != nil {
		return nil, d.err
	}
	if err := checkShape(p.End, depth); err != nil {
		return nil, err
	}
	if depth%8 != 0 && bitmap[len(bitmap)-1]&(0xff>>(depth%8)) != 0 {
		return nil, fmt.Errorf("bitmap bits after depth %d are set", depth)
	}
	n := 0
	for _, b := range bitmap {
		n += bits.OnesCount8(b)
	}
	if n*32 > len(d.b) {
		return nil, fmt.Errorf("short data reading %d siblings", n)
	}
	p.Siblings = make([]Hash, depth)
	for i := range p.Siblings {
		if bitmap[i/8]&(0x80>>(i%8)) != 0 {
			copy(p.Siblings[i][:], d.take(32, "sibling"))
		}
	}
	if p.End == EndOtherLeaf {
		copy(p.LeafKey[:], d.take(32, "leaf key"))
		copy(p.LeafValue[:], d.take(32, "leaf value"))
	}
	if d.err != nil {
		return nil, d.err
	}
	if len(d.b) != 0 {
		return nil, fmt.Errorf("%d trailing bytes", len(d.b))
	}
	if err := p.checkSiblings(); err != nil {
		return nil, err
	}
	return p, nil
}

// checkShape checks a proof's end and depth.
func checkShape(end ProofEnd, depth int) error {
	switch end {
	case EndIncluded, EndOtherLeaf:
		if depth > MapDepth {
			return fmt.Errorf("depth %d, limit is %d", depth, MapDepth)
		}
	case EndEmpty:
		// An empty subtree at depth 256 would have a leaf as its sibling,
		// which would have risen to the top of their parent.
		if depth >= MapDepth {
			return fmt.Errorf("empty end at depth %d, limit is %d", depth, MapDepth-1)
		}
	default:
		return fmt.Errorf("unknown end %d", end)
	}
	return nil
}

// checkSiblings checks that every sibling given is canonical: not the hash
// of an empty subtree (that is given as zero), and the last one not empty.
func (p *MapProof) checkSiblings() error {
	for i, s := range p.Siblings {
		if s == emptyHashes[i+1] {
			return fmt.Errorf("sibling at depth %d is the empty subtree's hash, not marked empty", i+1)
		}
	}
	if n := len(p.Siblings); n > 0 && p.Siblings[n-1].IsZero() {
		return fmt.Errorf("sibling beside the end, at depth %d, is empty: the subtree would be a leaf", n)
	}
	return nil
}

// VerifyIncluded checks that p proves that key maps to val in the map with
// the given root. A proof that does not is an Integrity error.
func (p *MapProof) VerifyIncluded(root, key, val Hash) error {
	const op spindle.Op = "dirlog.MapProof.VerifyIncluded"
	if p.End != EndIncluded {
		return spindle.E(op, spindle.Integrity, fmt.Sprintf("proof of inclusion ends at %s", p.End))
	}
	if err := p.check(); err != nil {
		return spindle.E(op, spindle.Integrity, err)
	}
	end := leafHash(len(p.Siblings), &key, &val)
	if got := p.climb(key, end); got != root {
		return spindle.E(op, spindle.Integrity, fmt.Sprintf("proof gives root %.12s for key %.12s and value %.12s, want %.12s", got, key, val, root))
	}
	return nil
}

// VerifyAbsent checks that p proves that key is absent from the map with
// the given root. A proof that does not is an Integrity error.
func (p *MapProof) VerifyAbsent(root, key Hash) error {
	const op spindle.Op = "dirlog.MapProof.VerifyAbsent"
	if err := p.check(); err != nil {
		return spindle.E(op, spindle.Integrity, err)
	}
	depth := len(p.Siblings)
	var end Hash
	switch p.End {
	case EndEmpty:
		end = emptyHashes[depth]
	case EndOtherLeaf:
		if p.LeafKey == key {
			return spindle.E(op, spindle.Integrity, fmt.Sprintf("proof of absence ends at the leaf of key %.12s itself", key))
		}
		for d := 0; d < depth; d++ {
			if bit(&p.LeafKey, d) != bit(&key, d) {
				return spindle.E(op, spindle.Integrity, fmt.Sprintf("proof of absence of key %.12s ends at leaf %.12s, off its path at depth %d", key, p.LeafKey, d))
			}
		}
		end = leafHash(depth, &p.LeafKey, &p.LeafValue)
	default:
		return spindle.E(op, spindle.Integrity, fmt.Sprintf("proof of absence ends at %s", p.End))
	}
	if got := p.climb(key, end); got != root {
		return spindle.E(op, spindle.Integrity, fmt.Sprintf("proof gives root %.12s for the absence of key %.12s, want %.12s", got, key, root))
	}
	return nil
}

// check checks that p has a shape a map makes.
func (p *MapProof) check() error {
	if err := checkShape(p.End, len(p.Siblings)); err != nil {
		return err
	}
	return p.checkSiblings()
}

// climb returns the root that the path of key gives with end as the hash
// of the node where it ends.
func (p *MapProof) climb(key, end Hash) Hash {
	h := end
	for d := len(p.Siblings) - 1; d >= 0; d-- {
		sib := &p.Siblings[d]
		if sib.IsZero() {
			sib = &emptyHashes[d+1]
		}
		if bit(&key, d) == 0 {
			h = innerHash(&h, sib)
		} else {
			h = innerHash(sib, &h)
		}
	}
	return h
}

// String names the end.
func (e ProofEnd) String() string {
	switch e {
	case EndIncluded:
		return "the key's leaf"
	case EndEmpty:
		return "an empty subtree"
	case EndOtherLeaf:
		return "another key's leaf"
	}
	return fmt.Sprintf("end(%d)", uint8(e))
}
