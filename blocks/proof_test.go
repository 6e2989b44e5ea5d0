package blocks_test

import (
	"bytes"
	"testing"

	"spindle.dev/blocks"
)

// A proof of holding changes with every input: another nonce, another
// holder or one byte of the block gives another answer.
func TestHoldProofBindsEveryInput(t *testing.T) {
	data := bytes.Repeat([]byte("block"), 1000)
	nonce := bytes.Repeat([]byte{7}, blocks.NonceSize)
	base := blocks.HoldProof("holder-a", nonce, data)
	if again := blocks.HoldProof("holder-a", nonce, data); again != base {
		t.Fatal("HoldProof is not deterministic")
	}
	other := append([]byte(nil), nonce...)
	other[0] ^= 1
	flipped := append([]byte(nil), data...)
	flipped[len(flipped)-1] ^= 1
	for name, p := range map[string][32]byte{
		"nonce":          blocks.HoldProof("holder-a", other, data),
		"holder":         blocks.HoldProof("holder-b", nonce, data),
		"block":          blocks.HoldProof("holder-a", nonce, flipped),
		"holder/nonce":   blocks.HoldProof("holder-a"+string(nonce[:1]), nonce[1:], data),
		"truncated data": blocks.HoldProof("holder-a", nonce, data[:len(data)-1]),
	} {
		if p == base {
			t.Errorf("changing the %s leaves the proof unchanged", name)
		}
	}
}

func BenchmarkHoldProof(b *testing.B) {
	data := make([]byte, 1<<20)
	nonce := make([]byte, blocks.NonceSize)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		blocks.HoldProof("12D3KooWholder", nonce, data)
	}
}
