// Package blocks stores content-addressed blocks.
//
// A block is at most [spindle.MaxStoredBlockSize] bytes. Its address, a
// [spindle.Ref], is the string form of a CIDv1 with codec raw and a
// sha2-256 multihash of the stored bytes. Every store checks the hash on
// Put through [Receive], so that no backend can forget the check, and
// never returns from Get bytes other than those it checked: a mismatch is
// an Integrity error. A store may guard what it holds with a cheaper
// checksum recorded at Put (blocks/disk keeps a CRC-32C beside each
// block), because every receiver of a block hashes it again.
//
// The stores are in subpackages: blocks/disk keeps blocks in files under a
// directory, blocks/mem keeps them in memory for tests, and
// blocks/blockstest is the suite that every store must pass.
package blocks

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"

	"github.com/ipfs/go-cid"
	"github.com/multiformats/go-multihash"

	"spindle.dev"
)

// A Digest is the SHA-256 hash of a block's stored bytes, the part of its
// Ref that names it.
type Digest [sha256.Size]byte

// Multihash returns the digest as a sha2-256 multihash: the hash of the
// block's CID, and its key in the DHT.
func (d Digest) Multihash() multihash.Multihash {
	mh := make(multihash.Multihash, 2+sha256.Size)
	mh[0] = multihash.SHA2_256
	mh[1] = sha256.Size
	copy(mh[2:], d[:])
	return mh
}

// CID returns the block's CID: version 1, codec raw, multihash sha2-256.
func (d Digest) CID() cid.Cid { return cid.NewCidV1(cid.Raw, d.Multihash()) }

// Ref returns the block address holding the digest: its CID in the
// canonical (base32) string form.
func (d Digest) Ref() spindle.Ref { return spindle.Ref(d.CID().String()) }

// RefOf returns the address of a block holding data. It hashes data once
// and does not check its size; use [Receive] in a store's Put.
func RefOf(data []byte) spindle.Ref {
	return Digest(sha256.Sum256(data)).Ref()
}

// ParseRef returns the digest named by ref. It accepts any multibase
// encoding of a CIDv1 with codec raw and a sha2-256 multihash of 32 bytes,
// and reports anything else as Invalid.
func ParseRef(ref spindle.Ref) (Digest, error) {
	const op spindle.Op = "blocks.ParseRef"
	var d Digest
	if ref == "" {
		return d, spindle.E(op, spindle.Invalid, "empty block ref")
	}
	if len(ref) > 128 {
		return d, spindle.E(op, spindle.Invalid, fmt.Sprintf("block ref of %d bytes is too long", len(ref)))
	}
	c, err := cid.Decode(string(ref))
	if err != nil {
		return d, spindle.E(op, spindle.Invalid, fmt.Sprintf("malformed block ref %q: %v", ref, err))
	}
	if c.Version() != 1 || c.Type() != cid.Raw {
		return d, spindle.E(op, spindle.Invalid, fmt.Sprintf("block ref %q is not a CIDv1 with codec raw", ref))
	}
	mh, err := multihash.Decode(c.Hash())
	if err != nil {
		return d, spindle.E(op, spindle.Invalid, fmt.Sprintf("block ref %q: bad multihash: %v", ref, err))
	}
	if mh.Code != multihash.SHA2_256 || len(mh.Digest) != sha256.Size {
		return d, spindle.E(op, spindle.Invalid, fmt.Sprintf("block ref %q does not use a 32-byte sha2-256 hash", ref))
	}
	copy(d[:], mh.Digest)
	return d, nil
}

// Check verifies that data is a valid block with address ref. It returns
// an Invalid error if ref is malformed or data is longer than
// [spindle.MaxStoredBlockSize], and an Integrity error if the hash of data
// does not match ref. Every store's Get goes through Check before it
// returns bytes.
func Check(ref spindle.Ref, data []byte) error {
	const op spindle.Op = "blocks.Check"
	d, err := ParseRef(ref)
	if err != nil {
		return spindle.E(op, err)
	}
	return CheckDigest(d, data)
}

// CheckDigest is [Check] for an already parsed address.
func CheckDigest(d Digest, data []byte) error {
	const op spindle.Op = "blocks.Check"
	if len(data) > spindle.MaxStoredBlockSize {
		return spindle.E(op, spindle.Invalid, sizeMessage(len(data)))
	}
	if sha256.Sum256(data) != d {
		return spindle.E(op, spindle.Integrity, fmt.Sprintf("block %s: stored bytes do not match its hash", d.Ref()))
	}
	return nil
}

// Receive checks that data may be stored as a block and returns its
// address and digest. It returns an Invalid error if data is longer than
// [spindle.MaxStoredBlockSize]. Every store's Put goes through Receive.
func Receive(data []byte) (spindle.Ref, Digest, error) {
	const op spindle.Op = "blocks.Receive"
	if len(data) > spindle.MaxStoredBlockSize {
		return "", Digest{}, spindle.E(op, spindle.Invalid, sizeMessage(len(data)))
	}
	d := Digest(sha256.Sum256(data))
	return d.Ref(), d, nil
}

func sizeMessage(n int) string {
	return fmt.Sprintf("block of %d bytes exceeds the limit of %d bytes", n, spindle.MaxStoredBlockSize)
}

// Holds reports whether store holds the block ref intact: true if Get
// returns it, false if Get finds it missing (NotExist) or damaged
// (Integrity), and Get's other errors as they are. A block Get lends is
// handed back if store is a [Recycler].
func Holds(ctx context.Context, store spindle.BlockStore, ref spindle.Ref) (bool, error) {
	data, err := store.Get(ctx, ref)
	switch {
	case err == nil:
		if r, ok := store.(Recycler); ok {
			r.Recycle(data)
		}
		return true, nil
	case errors.Is(err, spindle.NotExist), errors.Is(err, spindle.Integrity):
		return false, nil
	}
	return false, err
}

// A Recycler is a store whose Get lends buffers it can reuse: a caller
// done with a block that Get returned may hand it back with Recycle, and
// must not touch it after. Callers that never recycle lose nothing but
// the reuse.
type Recycler interface {
	Recycle(block []byte)
}
