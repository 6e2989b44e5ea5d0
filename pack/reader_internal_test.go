package pack

import (
	"bytes"
	"context"
	"crypto/cipher"
	"errors"
	"io"
	"testing"
	"time"

	"spindle.dev"
)

// shortAEAD is a cipher that opens every block to nothing, as a broken GCM
// (or a mutation that skips its check) would.
type shortAEAD struct{ cipher.AEAD }

func (shortAEAD) Open(dst, nonce, ciphertext, aad []byte) ([]byte, error) { return dst[:0], nil }

// A block that decrypts to fewer bytes than its entry says fails the read
// with Integrity; no read spins on it.
func TestReaderFailsOnShortBlock(t *testing.T) {
	s := newMemBlocks()
	keys := testKeys(t, "ann@example.com", 1)
	data := bytes.Repeat([]byte("x"), 3*spindle.MaxBlockSize/2)
	e := packFile(t, s, "ann@example.com/f", data, spindle.EEPack, keys)
	for name, read := range map[string]func(r *Reader) error{
		"Read":    func(r *Reader) error { _, err := io.ReadAll(r); return err },
		"ReadAt":  func(r *Reader) error { _, err := r.ReadAt(make([]byte, 10), 5); return err },
		"WriteTo": func(r *Reader) error { _, err := r.WriteTo(io.Discard); return err },
	} {
		r, err := NewReader(context.Background(), e, ReadConfig{Keys: keys, Get: s.get, WriterKeys: []spindle.PublicKey{keys.PublicKey()}})
		if err != nil {
			t.Fatal(err)
		}
		r.aead = shortAEAD{r.aead}
		done := make(chan error, 1)
		go func() { done <- read(r) }()
		select {
		case err := <-done:
			if !errors.Is(err, spindle.Integrity) {
				t.Errorf("%s of a block that decrypts to nothing: %v, want Integrity", name, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s of a block that decrypts to nothing still running after 10 s", name)
		}
		r.Close()
	}
}
