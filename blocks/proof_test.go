package blocks_test

import (
	"bytes"
	"testing"

	"spindle.dev/blocks"
)

// A proof of holding changes with every input: another nonce, another
// holder or one byte of the block gives another answer.
func TestProofOfHoldingBindsEveryInput(t *testing.T) {
	data := bytes.Repeat([]byte("block"), 1000)
	var nonce [blocks.NonceSize]byte
	nonce[0] = 7
	c := blocks.ChallengeWith(nonce, data)
	base := c.Answer("holder-a")
	if again := blocks.ChallengeWith(nonce, data).Answer("holder-a"); again != base {
		t.Fatal("the answer to a challenge is not deterministic")
	}
	other := nonce
	other[0] ^= 1
	flipped := append([]byte(nil), data...)
	flipped[len(flipped)-1] ^= 1
	for name, p := range map[string][blocks.ProofSize]byte{
		"nonce":          blocks.ChallengeWith(other, data).Answer("holder-a"),
		"holder":         c.Answer("holder-b"),
		"holder prefix":  c.Answer("holder-"),
		"block":          blocks.ChallengeWith(nonce, flipped).Answer("holder-a"),
		"truncated data": blocks.ChallengeWith(nonce, data[:len(data)-1]).Answer("holder-a"),
	} {
		if p == base {
			t.Errorf("changing the %s leaves the answer unchanged", name)
		}
	}
	if a, b := blocks.NewChallenge(data), blocks.NewChallenge(data); a.Nonce == b.Nonce {
		t.Error("two challenges have the same nonce")
	}
}

// BenchmarkChallenge measures what a challenge of a 1 MiB block costs
// either side: hashing the nonce and the block, and one holder's answer.
func BenchmarkChallenge(b *testing.B) {
	data := make([]byte, 1<<20)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		blocks.NewChallenge(data).Answer("12D3KooWholder")
	}
}
