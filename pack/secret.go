package pack

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"math/big"
	"strings"

	"spindle.dev"
)

// SecretSize is the length in bytes of a recovery secret: 128 bits.
const SecretSize = 16

// A Secret is a recovery secret: 128 random bits from which a user's key
// pair is derived (see [FromSecret]). Its text form is eight proquints,
// such as "lusab-babad-gutih-tugad.gutuk-bisog-mudof-sakat".
type Secret [SecretSize]byte

// NewSecret returns a fresh random recovery secret.
func NewSecret() (Secret, error) {
	var s Secret
	if _, err := rand.Read(s[:]); err != nil {
		return s, spindle.E(spindle.Op("pack.NewSecret"), spindle.Internal, err)
	}
	return s, nil
}

// Proquint alphabet (https://arxiv.org/html/0901.4016): each 16-bit word
// becomes consonant-vowel-consonant-vowel-consonant, 4+2+4+2+4 bits.
const (
	proConsonants = "bdfghjklmnprstvz"
	proVowels     = "aiou"
)

// String returns the secret as eight proquints, four and four joined by
// '-' and separated by '.'.
func (s Secret) String() string {
	var b strings.Builder
	for i := 0; i < SecretSize; i += 2 {
		switch {
		case i == SecretSize/2:
			b.WriteByte('.')
		case i > 0:
			b.WriteByte('-')
		}
		w := uint16(s[i])<<8 | uint16(s[i+1])
		b.WriteByte(proConsonants[w>>12&0xf])
		b.WriteByte(proVowels[w>>10&0x3])
		b.WriteByte(proConsonants[w>>6&0xf])
		b.WriteByte(proVowels[w>>4&0x3])
		b.WriteByte(proConsonants[w&0xf])
	}
	return b.String()
}

// ParseSecret parses the text form of a recovery secret. Case is ignored,
// and the words may be separated by '-', '.', spaces or nothing at all,
// so that a secret written down by hand can be typed back in any way.
func ParseSecret(text string) (Secret, error) {
	const op spindle.Op = "pack.ParseSecret"
	var s Secret
	letters := make([]byte, 0, 5*SecretSize/2)
	for i, r := range []rune(strings.ToLower(text)) {
		switch {
		case r == '-' || r == '.' || r == ' ' || r == '\t' || r == '\n' || r == '\r':
			continue
		case r < 0x80 && (strings.IndexByte(proConsonants, byte(r)) >= 0 || strings.IndexByte(proVowels, byte(r)) >= 0):
			letters = append(letters, byte(r))
		default:
			// The character is not echoed: it is most likely a mistyped
			// letter of the secret, and errors end up in logs and scrollback.
			return s, spindle.E(op, spindle.Invalid, fmt.Sprintf("recovery secret character %d is not a proquint letter (letters bdfghjklmnprstvz and aiou)", i+1))
		}
		if len(letters) > 5*SecretSize/2 {
			break
		}
	}
	if len(letters) != 5*SecretSize/2 {
		return s, spindle.E(op, spindle.Invalid, fmt.Sprintf("recovery secret must be %d five-letter words", SecretSize/2))
	}
	for i := 0; i < SecretSize/2; i++ {
		q := letters[5*i : 5*i+5]
		var w uint16
		for j, c := range q {
			set, bits := proConsonants, 4
			if j%2 == 1 {
				set, bits = proVowels, 2
			}
			k := strings.IndexByte(set, c)
			if k < 0 {
				// Neither the word nor its letters are echoed (see above).
				return s, spindle.E(op, spindle.Invalid, fmt.Sprintf("recovery secret word %d is not a proquint: a consonant, vowel, consonant, vowel, consonant", i+1))
			}
			w = w<<bits | uint16(k)
		}
		s[2*i], s[2*i+1] = byte(w>>8), byte(w)
	}
	return s, nil
}

// deriveInfo is the HKDF info string of the key derivation, followed by
// one counter byte. It is part of the format: changing it changes every
// user's keys.
const deriveInfo = "spindle.dev p256 user key v1"

// deriveKey derives a P-256 private key from a secret:
//
//	for c = 0, 1, 2, …:
//	    d = HKDF-SHA256(secret=s, salt=none, info=deriveInfo || byte(c), 32 bytes)
//	    if 1 <= d < n (read big-endian; n the order of P-256): return d
//
// A candidate falls outside [1, n-1] with probability about 2^-32, so
// the loop almost always ends at c = 0.
func deriveKey(s Secret) (*ecdsa.PrivateKey, error) {
	n := elliptic.P256().Params().N
	for c := 0; c < 256; c++ {
		d, err := hkdf.Key(sha256.New, s[:], nil, deriveInfo+string([]byte{byte(c)}), 32)
		if err != nil {
			return nil, err
		}
		v := new(big.Int).SetBytes(d)
		if v.Sign() == 0 || v.Cmp(n) >= 0 {
			continue
		}
		return ecdsa.ParseRawPrivateKey(elliptic.P256(), d)
	}
	return nil, fmt.Errorf("no valid P-256 scalar derived from the secret")
}
