package pack

import (
	"fmt"

	"spindle.dev"
)

// Verify checks the writer's signature on entry against writerKeys, the
// keys accepted for entry.Writer (the current key and, during a rotation
// window, previous ones), together with the packdata's structure, the
// block list's continuity (offsets and sizes tile the file), and the block
// hash sum. It needs no private key and reads no block. Every failure is
// Integrity, except an empty writerKeys, which is Invalid.
func Verify(entry *spindle.DirEntry, writerKeys []spindle.PublicKey) error {
	const op spindle.Op = "pack.Verify"
	if _, _, err := verify(entry, writerKeys); err != nil {
		return spindle.E(op, entry.Name, err)
	}
	return nil
}

func verify(e *spindle.DirEntry, writerKeys []spindle.PublicKey) (*packdata, [][32]byte, error) {
	if len(writerKeys) == 0 {
		return nil, nil, spindle.E(spindle.Invalid, e.Writer, "no writer keys to verify against")
	}
	p, digests, sum, err := decodeEntry(e)
	if err != nil {
		return nil, nil, err
	}
	var key spindle.PublicKey
	for _, k := range writerKeys {
		if h, err := spindle.KeyHash(k); err == nil && h == p.signer {
			key = k
			break
		}
	}
	if key == "" {
		return nil, nil, spindle.E(spindle.Integrity, e.Writer, "entry is signed by a key that is not one of the writer's")
	}
	if err := spindle.Verify(key, signedDigest(e, sum, p.commitment, p.stripes), p.sig); err != nil {
		return nil, nil, spindle.E(spindle.Integrity, e.Writer, "writer's signature does not verify")
	}
	return p, digests, nil
}

// decodeEntry decodes e's packdata and checks everything about e that
// needs no key: packing, block continuity and block sum.
func decodeEntry(e *spindle.DirEntry) (*packdata, [][32]byte, [32]byte, error) {
	var sum [32]byte
	if e.Attr.IsDir() || e.Attr.IsIncomplete() {
		return nil, nil, sum, spindle.E(spindle.Invalid, "entry is a directory or incomplete; it has no packed contents")
	}
	p, err := unmarshalPackdata(e.Packdata)
	if err != nil {
		return nil, nil, sum, spindle.E(spindle.Integrity, fmt.Errorf("packdata: %v", err))
	}
	if p.packing != e.Packing {
		return nil, nil, sum, spindle.E(spindle.Integrity, fmt.Sprintf("entry says packing %v, packdata says %v", e.Packing, p.packing))
	}
	digests, err := checkBlocks(e)
	if err != nil {
		return nil, nil, sum, spindle.E(spindle.Integrity, err)
	}
	if p.stripes != nil && p.stripes.blocks() != len(e.Blocks) {
		return nil, nil, sum, spindle.E(spindle.Integrity, fmt.Sprintf("packdata has the stripes of %d blocks, the entry has %d blocks", p.stripes.blocks(), len(e.Blocks)))
	}
	sum = blockSum(e.Blocks, digests)
	if p.packing != spindle.PlainPack && sum != p.blockSum {
		return nil, nil, sum, spindle.E(spindle.Integrity, "block list does not match the block sum")
	}
	p.blockSum = sum
	return p, digests, sum, nil
}

// Stripes returns how entry's blocks are erasure-coded, and the refs of
// each block's K+M shards, in block and shard order; the zero Erasure and
// no refs if its blocks are stored whole. It checks the entry's structure
// as [Verify] does but not its signature: a caller that has not verified
// the entry must not trust the refs. Errors are Integrity.
func Stripes(entry *spindle.DirEntry) (Erasure, [][]spindle.Ref, error) {
	const op spindle.Op = "pack.Stripes"
	p, _, _, err := decodeEntry(entry)
	if err != nil {
		return Erasure{}, nil, spindle.E(op, entry.Name, err)
	}
	if p.stripes == nil {
		return Erasure{}, nil, nil
	}
	e, refs := p.stripes.refs()
	return e, refs, nil
}
