package pack

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/sha256"
	"errors"
	"io"

	"spindle.dev"
)

// Same reports whether r holds exactly the contents that entry, a packed
// file, describes. It packs r block by block as entry's blocks were packed
// (for ee, sealed under entry's own file key, which keys unwraps; the nonce
// and associated data of each block follow from its index) and compares
// the SHA-256 of each result with the block's ref, so it fetches no block:
// the cost is reading r and hashing (and, for ee, sealing) it. It stops at
// the first block that differs, and reads at most one byte past entry's
// size.
//
// Same does not check the writer's signature; callers pass an entry that
// has been verified, as the client's lookups are. It fails with Integrity
// if the entry is malformed, CannotDecrypt if keys hold no wrap of an ee
// file key (keys may be nil: then only a file wrapped for [AllKey]
// opens), and IO if reading r fails.
func Same(entry *spindle.DirEntry, r io.Reader, keys *Keys) (bool, error) {
	const op spindle.Op = "pack.Same"
	p, digests, _, err := decodeEntry(entry)
	if err != nil {
		return false, spindle.E(op, entry.Name, err)
	}
	var aead cipher.AEAD
	if p.packing == spindle.EEPack {
		key, err := unwrapFileKey(p, keys)
		if err != nil {
			return false, spindle.E(op, entry.Name, err)
		}
		block, err := aes.NewCipher(key)
		if err != nil {
			return false, spindle.E(op, entry.Name, spindle.Internal, err)
		}
		if aead, err = cipher.NewGCM(block); err != nil {
			return false, spindle.E(op, entry.Name, spindle.Internal, err)
		}
	}
	bp := blockBufs.Get().(*[]byte)
	defer blockBufs.Put(bp)
	buf := (*bp)[:spindle.MaxBlockSize]
	var nonce [12]byte
	var aad [40]byte
	for i, b := range entry.Blocks {
		// decodeEntry checked that every block holds 1 to MaxBlockSize bytes.
		if _, err := io.ReadFull(r, buf[:b.Size]); err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return false, nil // r is shorter.
			}
			return false, spindle.E(op, entry.Name, spindle.IO, err)
		}
		stored := buf[:b.Size]
		if aead != nil {
			blockNonce(&nonce, uint64(i))
			blockAAD(&aad, &p.commitment, uint64(i))
			stored = aead.Seal(buf[:0:cap(buf)], nonce[:], stored, aad[:])
		}
		if sha256.Sum256(stored) != digests[i] {
			return false, nil
		}
	}
	// The contents match entry's; r must end here too.
	n, err := io.ReadFull(r, buf[:1])
	switch {
	case n > 0:
		return false, nil
	case err == io.EOF:
		return true, nil
	}
	return false, spindle.E(op, entry.Name, spindle.IO, err)
}
