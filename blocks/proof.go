package blocks

import (
	"crypto/sha256"
	"encoding/binary"
)

// Proofs of holding.
//
// A node that counts another as a holder of a block asks it to prove it:
// it sends a fresh random nonce of [NonceSize] bytes, and the holder
// answers with [HoldProof] of its own peer ID, the nonce and the block.
// The nonce comes before the block in the hash, so no answer can be
// worked out before the challenge arrives, and only the block's bytes
// give it; the holder's ID is in the hash, so a node cannot pass on a
// challenge to an honest holder and hand back its answer as its own.
// The challenger holds the block (it pushes it, or repairs a copy it
// holds), so it works out the answer itself.

// NonceSize is the size of a challenge's nonce, and ProofSize that of
// its answer.
const (
	NonceSize = 32
	ProofSize = sha256.Size
)

// proofContext keeps proofs of holding apart from every other hash of a
// block.
const proofContext = "spindle block proof of holding v1\x00"

// HoldProof returns the answer of the holder whose peer ID (in its binary
// form) is holder to the challenge nonce for the block data: SHA-256 of a
// context string, the holder's ID and its length, the nonce and the
// whole block.
func HoldProof(holder string, nonce, data []byte) [ProofSize]byte {
	h := sha256.New()
	h.Write([]byte(proofContext))
	var n [2]byte
	binary.BigEndian.PutUint16(n[:], uint16(len(holder)))
	h.Write(n[:])
	h.Write([]byte(holder))
	h.Write(nonce)
	h.Write(data)
	var out [ProofSize]byte
	h.Sum(out[:0])
	return out
}
