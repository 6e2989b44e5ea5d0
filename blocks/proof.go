package blocks

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
)

// Proofs of holding.
//
// A node that counts another as a holder of a block asks it to prove it:
// it sends a fresh random nonce of [NonceSize] bytes, and the holder
// answers with [Challenge.Answer] for its own peer ID: a hash of its ID
// and of the nonce and the whole block. The nonce comes before the block
// in the hash, so no answer can be worked out before the challenge
// arrives, and only the block's bytes give it; the holder's ID is in the
// answer, and the hash of the nonce and the block never travels, so a
// node cannot pass a challenge on to an honest holder and hand back its
// answer as its own.
//
// The challenger hashes the block once per challenge, however many
// holders it asks with the same nonce (each answers for its own ID). It
// holds the block (it pushes it, or repairs a copy it holds); a node that
// does not could keep challenges made while it did, each good for one
// question to each holder.

// NonceSize is the size of a challenge's nonce, and ProofSize that of
// its answer.
const (
	NonceSize = 32
	ProofSize = sha256.Size
)

// Context strings keep the hashes of proofs of holding apart from every
// other hash of a block.
const (
	challengeContext = "spindle block challenge v1\x00"
	answerContext    = "spindle block proof of holding v1\x00"
)

// A Challenge is a nonce and the hash of the nonce and a block's bytes,
// from which the answer of any holder follows.
type Challenge struct {
	Nonce [NonceSize]byte
	sum   [sha256.Size]byte
}

// NewChallenge returns a challenge with a fresh random nonce for the
// block data.
func NewChallenge(data []byte) Challenge {
	var nonce [NonceSize]byte
	rand.Read(nonce[:])
	return ChallengeWith(nonce, data)
}

// ChallengeWith returns the challenge with the given nonce for the block
// data, as a holder answering it works it out.
func ChallengeWith(nonce [NonceSize]byte, data []byte) Challenge {
	h := sha256.New()
	h.Write([]byte(challengeContext))
	h.Write(nonce[:])
	h.Write(data)
	c := Challenge{Nonce: nonce}
	h.Sum(c.sum[:0])
	return c
}

// Answer returns the answer to the challenge of the holder whose peer ID
// (in its binary form) is holder: SHA-256 of a context string, the
// length of the ID, the ID and the hash of the nonce and the block.
func (c Challenge) Answer(holder string) [ProofSize]byte {
	h := sha256.New()
	h.Write([]byte(answerContext))
	var n [2]byte
	binary.BigEndian.PutUint16(n[:], uint16(len(holder)))
	h.Write(n[:])
	h.Write([]byte(holder))
	h.Write(c.sum[:])
	var out [ProofSize]byte
	h.Sum(out[:0])
	return out
}
