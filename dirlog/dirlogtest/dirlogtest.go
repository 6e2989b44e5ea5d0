// Package dirlogtest has helpers for the tests of package dirlog and of
// the dir host, dirlog/host: a P-256 signer that is both a user and a dir
// host, and directory entries to put. It imports no dirlog, so that
// dirlog's own tests can use it.
package dirlogtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"fmt"
	"testing"

	"spindle.dev"
)

// A Signer is an in-memory P-256 key acting as a user (spindle.Signer),
// as a dir host that signs heads (dirlog.HeadSigner), and as a reader
// that knows that host (dirlog.HeadVerifier).
type Signer struct {
	user spindle.UserName
	priv *ecdsa.PrivateKey
	pub  spindle.PublicKey
}

// NewSigner returns a Signer with a new key for user.
func NewSigner(t testing.TB, user spindle.UserName) *Signer {
	t.Helper()
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := spindle.FormatPublicKey(&priv.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return &Signer{user: user, priv: priv, pub: pub}
}

// UserName returns the user s signs as.
func (s *Signer) UserName() spindle.UserName { return s.user }

// PublicKey returns s's public key.
func (s *Signer) PublicKey() spindle.PublicKey { return s.pub }

// Sign signs digest.
func (s *Signer) Sign(digest []byte) (spindle.Signature, error) {
	return ecdsa.SignASN1(rand.Reader, s.priv, digest)
}

// HostID returns s's user name, as the dir host ID its heads name.
func (s *Signer) HostID() string { return string(s.user) }

// HostKey returns s's public key, as the dir host key its heads name.
func (s *Signer) HostKey() []byte { return []byte(s.pub) }

// VerifyHead accepts the heads s signed, as a reader that knows s as a
// dir host would.
func (s *Signer) VerifyHead(_ spindle.UserName, host string, key, digest, sig []byte) error {
	if host != string(s.user) || string(key) != string(s.pub) {
		return fmt.Errorf("signed by %s, not by dir host %s", host, s.user)
	}
	return spindle.Verify(s.pub, digest, sig)
}

// File returns the entry of an encrypted file of size bytes at name,
// with made-up block references.
func File(name spindle.PathName, size int64) *spindle.DirEntry {
	d := &spindle.DirEntry{Name: name, Packing: spindle.EEPack, Size: size, Time: 1234, Packdata: []byte("wrapped keys")}
	for off := int64(0); off < size; off += spindle.MaxBlockSize {
		n := min(size-off, spindle.MaxBlockSize)
		d.Blocks = append(d.Blocks, spindle.DirBlock{Ref: spindle.Ref(fmt.Sprintf("bafk%s%d", name, off)), Offset: off, Size: n})
	}
	return d
}

// Control returns the entry of a plain-text Access or Group file.
func Control(name spindle.PathName, text string) *spindle.DirEntry {
	return &spindle.DirEntry{Name: name, Packing: spindle.PlainPack, Size: int64(len(text)), Inline: []byte(text)}
}

// WantKind fails the test unless err has kind k.
func WantKind(t testing.TB, err error, k spindle.Kind, what string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: no error, want %v", what, k)
	}
	if got := spindle.KindOf(err); got != k {
		t.Fatalf("%s: error %q has kind %v, want %v", what, err, got, k)
	}
}
