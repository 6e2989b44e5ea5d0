package pack

import (
	"crypto/sha256"
	"sync"

	"spindle.dev"
)

// allInfo names the well-known key pair that stands for all users. It is
// part of the format: changing it would strand every file wrapped for all.
const allInfo = "spindle.dev all users key v1"

// allPair is the well-known key pair. Its private key is no secret: it is
// derived from allInfo exactly as a user's key is derived from a recovery
// secret, so every client can compute it.
var allPair = sync.OnceValue(func() *keyPair {
	var s Secret
	sum := sha256.Sum256([]byte(allInfo))
	copy(s[:], sum[:])
	priv, err := deriveKey(s)
	if err != nil {
		panic("pack: cannot derive the all users key: " + err.Error())
	}
	kp, err := newKeyPair(priv)
	if err != nil {
		panic("pack: cannot derive the all users key: " + err.Error())
	}
	return kp
})

// AllKey returns the public key that stands for all users ([spindle.AllUsers],
// "all" in an Access file). Its private key is derived from a public
// constant, so every client holds it: a file key wrapped for AllKey can be
// unwrapped by anyone, with or without keys of their own.
//
// This is how an ee file written before its tree was opened to all becomes
// readable by all: the owner's client adds a wrap for AllKey with [Share],
// which changes only the packdata, not a block, and removes it the same
// way when all may read the file no more (a reader who kept the file key
// meanwhile keeps it, as with any revoked reader). A wrap for AllKey has
// the format of every other wrap, so packdata version 1 holds it unchanged
// and a client that does not know AllKey simply finds no wrap of its own.
func AllKey() spindle.PublicKey { return allPair().pub }

// IsWrappedForAll reports whether entry's file key is wrapped for
// [AllKey], so that anyone may unwrap it. Errors are Integrity.
func IsWrappedForAll(entry *spindle.DirEntry) (bool, error) {
	const op spindle.Op = "pack.IsWrappedForAll"
	hashes, err := WrappedKeys(entry)
	if err != nil {
		return false, spindle.E(op, err)
	}
	all := allPair().hash
	for _, h := range hashes {
		if h == all {
			return true, nil
		}
	}
	return false, nil
}
