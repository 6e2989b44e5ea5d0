package dirlog

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"fmt"
	"testing"

	"spindle.dev"
)

// testSigner is a minimal P-256 spindle.Signer for tests.
type testSigner struct {
	user spindle.UserName
	priv *ecdsa.PrivateKey
	pub  spindle.PublicKey
}

func newSigner(t testing.TB, user spindle.UserName) *testSigner {
	t.Helper()
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := spindle.FormatPublicKey(&priv.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return &testSigner{user: user, priv: priv, pub: pub}
}

func (s *testSigner) UserName() spindle.UserName   { return s.user }
func (s *testSigner) PublicKey() spindle.PublicKey { return s.pub }
func (s *testSigner) Sign(digest []byte) (spindle.Signature, error) {
	return ecdsa.SignASN1(rand.Reader, s.priv, digest)
}

func (s *testSigner) HostID() string  { return string(s.user) }
func (s *testSigner) HostKey() []byte { return []byte(s.pub) }

// VerifyHead accepts the heads s signed, as a reader that knows s as a
// dir host would.
func (s *testSigner) VerifyHead(_ spindle.UserName, host string, key, digest, sig []byte) error {
	if host != string(s.user) || string(key) != string(s.pub) {
		return fmt.Errorf("signed by %s, not by dir host %s", host, s.user)
	}
	return spindle.Verify(s.pub, digest, sig)
}

var (
	_ spindle.Signer = (*testSigner)(nil)
	_ HeadSigner     = (*testSigner)(nil)
	_ HeadVerifier   = (*testSigner)(nil)
)

const (
	ann = spindle.UserName("ann@example.com")
	bob = spindle.UserName("bob@example.com")
	cat = spindle.UserName("cat@example.com")
	dan = spindle.UserName("dan@other.org")
)

func file(name spindle.PathName, size int64) *spindle.DirEntry {
	d := &spindle.DirEntry{Name: name, Packing: spindle.EEPack, Size: size, Time: 1234, Packdata: []byte("wrapped keys")}
	for off := int64(0); off < size; off += spindle.MaxBlockSize {
		n := min(size-off, spindle.MaxBlockSize)
		d.Blocks = append(d.Blocks, spindle.DirBlock{Ref: spindle.Ref(fmt.Sprintf("bafk%s%d", name, off)), Offset: off, Size: n})
	}
	return d
}

func control(name spindle.PathName, text string) *spindle.DirEntry {
	return &spindle.DirEntry{Name: name, Packing: spindle.PlainPack, Size: int64(len(text)), Inline: []byte(text)}
}

// wantKind fails the test unless err has kind k.
func wantKind(t testing.TB, err error, k spindle.Kind, what string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: no error, want %v", what, k)
	}
	if got := spindle.KindOf(err); got != k {
		t.Fatalf("%s: error %q has kind %v, want %v", what, err, got, k)
	}
}
