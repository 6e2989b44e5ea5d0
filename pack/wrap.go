package pack

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdh"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"

	"spindle.dev"
)

// A readerKey is a reader's public key ready for wrapping.
type readerKey struct {
	pub  spindle.PublicKey
	dh   *ecdh.PublicKey
	hash [32]byte
}

func parseReaderKey(k spindle.PublicKey) (readerKey, error) {
	pub, err := spindle.ParsePublicKey(k)
	if err != nil {
		return readerKey{}, err
	}
	dh, err := pub.ECDH()
	if err != nil {
		return readerKey{}, err
	}
	hash, err := spindle.KeyHash(k)
	if err != nil {
		return readerKey{}, err
	}
	return readerKey{pub: k, dh: dh, hash: hash}, nil
}

// newWrap seals fileKey for reader r with a fresh ephemeral key and nonce.
func newWrap(fileKey []byte, commitment [32]byte, r readerKey) (wrap, error) {
	eph, err := ecdh.P256().GenerateKey(rand.Reader)
	if err != nil {
		return wrap{}, err
	}
	var nonce [12]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return wrap{}, err
	}
	return sealWrap(fileKey, commitment, r, eph, nonce)
}

// sealWrap seals fileKey for reader r (ephemeral-static ECDH):
//
//	shared = ECDH(eph, reader)
//	kek    = HKDF-SHA256(secret=shared, salt=ephPub || readerPub,
//	                     info=wrapInfoPrefix || packing(1) || readerKeyHash(32) || nonce(12), 32 bytes)
//	sealed = AES-256-GCM(kek).Seal(nonce, fileKey, additional data=commitment)
func sealWrap(fileKey []byte, commitment [32]byte, r readerKey, eph *ecdh.PrivateKey, nonce [12]byte) (wrap, error) {
	w := wrap{keyHash: r.hash, nonce: nonce}
	copy(w.eph[:], eph.PublicKey().Bytes())
	shared, err := eph.ECDH(r.dh)
	if err != nil {
		return wrap{}, err
	}
	aead, err := wrapAEAD(shared, w.eph[:], r.dh.Bytes(), &w)
	if err != nil {
		return wrap{}, err
	}
	aead.Seal(w.sealed[:0], w.nonce[:], fileKey, commitment[:])
	return w, nil
}

func wrapAEAD(shared, ephPub, readerPub []byte, w *wrap) (cipher.AEAD, error) {
	salt := make([]byte, 0, len(ephPub)+len(readerPub))
	salt = append(append(salt, ephPub...), readerPub...)
	info := make([]byte, 0, len(wrapInfoPrefix)+1+32+12)
	info = append(info, wrapInfoPrefix...)
	info = append(info, byte(spindle.EEPack))
	info = append(info, w.keyHash[:]...)
	info = append(info, w.nonce[:]...)
	kek, err := hkdf.Key(sha256.New, shared, salt, string(info), 32)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(kek)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

var (
	errWrapOpen   = errors.New("wrapped key does not open with this key")
	errWrongKey   = errors.New("wrapped key does not match the file's key commitment")
	errBadEphKey  = errors.New("wrap holds an invalid ephemeral key")
	errNoWrapHere = errors.New("no wrapped key for any of the reader's keys")
)

// openWrap unwraps w with the private key p. It returns errWrongKey, an
// Integrity failure, if the wrap opens but holds a key other than the one
// committed to, and another error, a CannotDecrypt failure, otherwise.
func openWrap(w *wrap, p *keyPair, commitment [32]byte) ([]byte, error) {
	ephPub, err := ecdh.P256().NewPublicKey(w.eph[:])
	if err != nil {
		return nil, errBadEphKey
	}
	shared, err := p.dh.ECDH(ephPub)
	if err != nil {
		return nil, errBadEphKey
	}
	aead, err := wrapAEAD(shared, w.eph[:], p.dh.PublicKey().Bytes(), w)
	if err != nil {
		return nil, err
	}
	key, err := aead.Open(nil, w.nonce[:], w.sealed[:], commitment[:])
	if err != nil {
		return nil, errWrapOpen
	}
	if commit(key) != commitment {
		return nil, errWrongKey
	}
	return key, nil
}

// unwrapFileKey finds the wrap for one of k's keys, current or archived,
// or else the wrap for [AllKey], and opens it. k may be nil: then only a
// wrap for AllKey opens. Errors are *spindle.Error with kind CannotDecrypt
// or Integrity.
func unwrapFileKey(p *packdata, k *Keys) ([]byte, error) {
	var lastErr error = errNoWrapHere
	var user spindle.UserName
	if k != nil {
		user = k.user
	}
	all := -1
	for i := range p.wraps {
		w := &p.wraps[i]
		var pair *keyPair
		if k != nil {
			pair = k.pairFor(w.keyHash)
		}
		if pair == nil {
			if w.keyHash == allPair().hash {
				all = i
			}
			continue
		}
		key, err := openWrap(w, pair, p.commitment)
		if err == errWrongKey {
			return nil, spindle.E(spindle.Integrity, user, err)
		}
		if err == nil {
			return key, nil
		}
		lastErr = err
	}
	if all >= 0 {
		key, err := openWrap(&p.wraps[all], allPair(), p.commitment)
		if err == errWrongKey {
			return nil, spindle.E(spindle.Integrity, user, fmt.Errorf("the wrap for all users: %w", err))
		}
		if err == nil {
			return key, nil
		}
		lastErr = err
	}
	if k == nil && all < 0 {
		return nil, spindle.E(spindle.CannotDecrypt, "no keys given to unwrap the file key, and it is not wrapped for all users")
	}
	return nil, spindle.E(spindle.CannotDecrypt, user, lastErr)
}
