package spindle

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
)

const publicKeyPrefix = "p256:"

// ParsePublicKey decodes a public key from its text form and checks that it
// is a point on P-256.
func ParsePublicKey(k PublicKey) (*ecdsa.PublicKey, error) {
	const op Op = "spindle.ParsePublicKey"
	s := strings.TrimSpace(string(k))
	if !strings.HasPrefix(s, publicKeyPrefix) {
		return nil, E(op, Invalid, "public key does not start with "+quote(publicKeyPrefix))
	}
	raw, err := base64.RawURLEncoding.DecodeString(s[len(publicKeyPrefix):])
	if err != nil {
		return nil, E(op, Invalid, fmt.Errorf("public key is not base64url: %v", err))
	}
	pub, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), raw)
	if err != nil {
		return nil, E(op, Invalid, fmt.Errorf("public key is not a P-256 point: %v", err))
	}
	return pub, nil
}

// FormatPublicKey returns the text form of a P-256 public key.
func FormatPublicKey(pub *ecdsa.PublicKey) (PublicKey, error) {
	raw, err := pub.Bytes()
	if err != nil {
		return "", E(Op("spindle.FormatPublicKey"), Invalid, err)
	}
	return PublicKey(publicKeyPrefix + base64.RawURLEncoding.EncodeToString(raw)), nil
}

// KeyHash returns the SHA-256 hash of a public key's point, which identifies
// the key in wrapped-key lists independently of its text form.
func KeyHash(k PublicKey) ([32]byte, error) {
	pub, err := ParsePublicKey(k)
	if err != nil {
		return [32]byte{}, err
	}
	raw, _ := pub.Bytes()
	return sha256.Sum256(raw), nil
}

// Verify checks sig, a signature made by [Signer.Sign], over digest with key k.
// A bad key is Invalid; a signature that does not verify is Integrity.
func Verify(k PublicKey, digest []byte, sig Signature) error {
	const op Op = "spindle.Verify"
	pub, err := ParsePublicKey(k)
	if err != nil {
		return E(op, err)
	}
	if !ecdsa.VerifyASN1(pub, digest, sig) {
		return E(op, Integrity, "signature does not verify")
	}
	return nil
}

func quote(s string) string { return strconv.Quote(s) }
