package pack

import (
	"crypto/ecdh"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"fmt"

	"spindle.dev"
)

// Keys holds a user's key pairs: the current one, with which it signs and
// to which new files are wrapped, and an archive of previous pairs kept
// after rotation so that files wrapped for an old key stay readable until
// they are re-wrapped (see [Share]). Keys never reveals a private key
// except through [Keys.Save].
//
// The methods of Keys are safe for concurrent use, except [Keys.Rotate],
// which must not run concurrently with any other method.
type Keys struct {
	user    spindle.UserName
	current *keyPair
	archive []*keyPair // Previous pairs, newest first.
}

var _ spindle.Signer = (*Keys)(nil)

// A keyPair is one P-256 key, usable for ECDSA and ECDH.
type keyPair struct {
	priv *ecdsa.PrivateKey
	dh   *ecdh.PrivateKey
	pub  spindle.PublicKey
	hash [32]byte // spindle.KeyHash(pub)
}

func newKeyPair(priv *ecdsa.PrivateKey) (*keyPair, error) {
	dh, err := priv.ECDH()
	if err != nil {
		return nil, err
	}
	pub, err := spindle.FormatPublicKey(&priv.PublicKey)
	if err != nil {
		return nil, err
	}
	hash, err := spindle.KeyHash(pub)
	if err != nil {
		return nil, err
	}
	return &keyPair{priv: priv, dh: dh, pub: pub, hash: hash}, nil
}

// parseScalar builds a key pair from a 32-byte big-endian private scalar.
func parseScalar(d []byte) (*keyPair, error) {
	priv, err := ecdsa.ParseRawPrivateKey(elliptic.P256(), d)
	if err != nil {
		return nil, err
	}
	return newKeyPair(priv)
}

// Generate makes keys for user from a fresh recovery secret, which it
// returns so that it can be shown to the user once. [FromSecret] with the
// same secret re-creates the same keys.
func Generate(user spindle.UserName) (*Keys, Secret, error) {
	const op spindle.Op = "pack.Generate"
	s, err := NewSecret()
	if err != nil {
		return nil, s, spindle.E(op, user, err)
	}
	k, err := FromSecret(user, s)
	if err != nil {
		return nil, s, spindle.E(op, err)
	}
	return k, s, nil
}

// FromSecret derives user's key pair from a recovery secret. The derivation
// is deterministic, so the same secret gives the same key on any machine:
// the private scalar is HKDF-SHA256 of the secret with the info string
// "spindle.dev p256 user key v1" followed by a counter byte, starting at 0
// and incremented until the 32-byte big-endian result lies in [1, n-1].
// The returned keys have an empty archive.
func FromSecret(user spindle.UserName, s Secret) (*Keys, error) {
	const op spindle.Op = "pack.FromSecret"
	priv, err := deriveKey(s)
	if err != nil {
		return nil, spindle.E(op, user, spindle.Internal, err)
	}
	kp, err := newKeyPair(priv)
	if err != nil {
		return nil, spindle.E(op, user, spindle.Internal, err)
	}
	return &Keys{user: user, current: kp}, nil
}

// UserName implements [spindle.Signer].
func (k *Keys) UserName() spindle.UserName { return k.user }

// PublicKey implements [spindle.Signer]; it returns the current public key.
func (k *Keys) PublicKey() spindle.PublicKey { return k.current.pub }

// Sign implements [spindle.Signer]: it signs a 32-byte SHA-256 digest with
// the current key, returning an ASN.1 DER signature.
func (k *Keys) Sign(digest []byte) (spindle.Signature, error) {
	const op spindle.Op = "pack.Sign"
	if len(digest) != 32 {
		return nil, spindle.E(op, k.user, spindle.Invalid, fmt.Sprintf("digest is %d bytes, want 32", len(digest)))
	}
	sig, err := ecdsa.SignASN1(rand.Reader, k.current.priv, digest)
	if err != nil {
		return nil, spindle.E(op, k.user, spindle.Internal, err)
	}
	return sig, nil
}

// PublicKeys returns the current public key followed by the archived ones,
// newest first: every key for which this user can unwrap file keys.
func (k *Keys) PublicKeys() []spindle.PublicKey {
	keys := []spindle.PublicKey{k.current.pub}
	for _, p := range k.archive {
		keys = append(keys, p.pub)
	}
	return keys
}

// Rotate makes the key derived from s the current key and moves the
// previous current key to the front of the archive. Rotating to the
// current key is an error (Exist).
func (k *Keys) Rotate(s Secret) error {
	const op spindle.Op = "pack.Rotate"
	priv, err := deriveKey(s)
	if err != nil {
		return spindle.E(op, k.user, spindle.Internal, err)
	}
	kp, err := newKeyPair(priv)
	if err != nil {
		return spindle.E(op, k.user, spindle.Internal, err)
	}
	if kp.hash == k.current.hash {
		return spindle.E(op, k.user, spindle.Exist, "the new key is the current key")
	}
	archive := []*keyPair{k.current}
	for _, p := range k.archive {
		if p.hash != kp.hash {
			archive = append(archive, p)
		}
	}
	k.current, k.archive = kp, archive
	return nil
}

// pairFor returns the pair, current or archived, whose public key has the
// given hash, or nil.
func (k *Keys) pairFor(hash [32]byte) *keyPair {
	if k.current.hash == hash {
		return k.current
	}
	for _, p := range k.archive {
		if p.hash == hash {
			return p
		}
	}
	return nil
}
