package p2p

import (
	"bytes"
	"testing"

	"spindle.dev/blocks"
)

func FuzzParseProve(f *testing.F) {
	ref := blocks.RefOf([]byte("block"))
	f.Add(append(make([]byte, blocks.NonceSize), ref...))
	f.Add(append(bytes.Repeat([]byte{0xff}, blocks.NonceSize), "bafkqaaa"...))
	f.Add(make([]byte, blocks.NonceSize))
	f.Add([]byte{4, 0, 0})
	f.Fuzz(func(t *testing.T, body []byte) {
		nonce, got, err := parseProve(body)
		if err != nil {
			return
		}
		if _, err := blocks.ParseRef(got); err != nil {
			t.Fatalf("parseProve accepted ref %q: %v", got, err)
		}
		if !bytes.Equal(append(nonce[:], got...), body) {
			t.Fatalf("parseProve(%q) = %q, %q: not the request split", body, nonce, got)
		}
	})
}
