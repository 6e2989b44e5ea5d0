package keylog

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"testing"

	"golang.org/x/mod/sumdb/note"

	"spindle.dev"
)

// testSigner is a spindle.Signer over an in-memory P-256 key.
type testSigner struct {
	name spindle.UserName
	key  *ecdsa.PrivateKey
	pub  spindle.PublicKey
}

var _ spindle.Signer = (*testSigner)(nil)

func newSigner(t testing.TB, name spindle.UserName) *testSigner {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := spindle.FormatPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return &testSigner{name: name, key: key, pub: pub}
}

func (s *testSigner) UserName() spindle.UserName   { return s.name }
func (s *testSigner) PublicKey() spindle.PublicKey { return s.pub }
func (s *testSigner) Sign(digest []byte) (spindle.Signature, error) {
	return ecdsa.SignASN1(rand.Reader, s.key, digest)
}

// signHead returns the signed note of tree head h.
func signHead(s note.Signer, h HeadInfo) ([]byte, error) {
	return note.Sign(&note.Note{Text: string(FormatHead(h))}, s)
}
