package pack

import (
	"fmt"
	"slices"

	"spindle.dev"
)

// Share returns new packdata for entry, an ee file, whose file key is
// wrapped for exactly the given readers: wraps already held by a reader
// are kept as they are, new readers get new wraps, and wraps for keys not
// in readers are dropped. The file key is unwrapped with keys, current or
// archived, so after a rotation Share both reads a file wrapped for the
// old key and re-wraps it for the new one. Readers may include [AllKey],
// which makes the file readable by anyone; keys may be nil if the file is
// already wrapped for all. The writer's signature does not cover the wraps
// and stays valid. Share does not modify entry.
//
// Share fails with CannotDecrypt if keys hold no wrap, Integrity if the
// entry is malformed or a wrap holds a key other than the committed one,
// and Invalid for plain and eeintegrity entries, which have no wraps, for
// an empty reader set and for a malformed reader key.
func Share(entry *spindle.DirEntry, keys *Keys, readers []spindle.PublicKey) ([]byte, error) {
	const op spindle.Op = "pack.Share"
	p, wraps, err := rewrap(entry, keys, readers)
	if err != nil {
		return nil, spindle.E(op, entry.Name, err)
	}
	p.wraps = wraps
	return p.marshal(), nil
}

// AddReaders is [Share] that removes only the wraps for the keys in
// remove: it wraps entry's file key for the readers who hold no wrap yet
// and keeps every other wrap entry has. The owner's client uses it when it
// cannot tell who all the readers are (a group it cannot read grants
// read), so that no reader loses a key by mistake, while a key it knows to
// be no reader's (such as [AllKey]) still goes. Errors are those of Share.
func AddReaders(entry *spindle.DirEntry, keys *Keys, readers, remove []spindle.PublicKey) ([]byte, error) {
	const op spindle.Op = "pack.AddReaders"
	p, wraps, err := rewrap(entry, keys, readers)
	if err != nil {
		return nil, spindle.E(op, entry.Name, err)
	}
	gone := make(map[[32]byte]bool)
	for _, k := range remove {
		h, err := spindle.KeyHash(k)
		if err != nil {
			return nil, spindle.E(op, entry.Name, spindle.Invalid, err)
		}
		gone[h] = true
	}
	wraps = slices.DeleteFunc(wraps, func(w wrap) bool { return gone[w.keyHash] })
	for _, w := range p.wraps {
		if !gone[w.keyHash] && !slices.ContainsFunc(wraps, func(v wrap) bool { return v.keyHash == w.keyHash }) {
			wraps = append(wraps, w)
		}
	}
	if len(wraps) == 0 {
		return nil, spindle.E(op, entry.Name, spindle.Invalid, "no readers to wrap the file key for")
	}
	if len(wraps) > maxWraps {
		return nil, spindle.E(op, entry.Name, spindle.Invalid, fmt.Sprintf("%d readers, at most %d allowed", len(wraps), maxWraps))
	}
	slices.SortFunc(wraps, func(a, b wrap) int { return compareHash(a.keyHash, b.keyHash) })
	p.wraps = wraps
	return p.marshal(), nil
}

// rewrap decodes entry's packdata, unwraps its file key with keys, and
// wraps it for readers, reusing the wraps entry already has for them.
func rewrap(entry *spindle.DirEntry, keys *Keys, readers []spindle.PublicKey) (*packdata, []wrap, error) {
	p, _, _, err := decodeEntry(entry)
	if err != nil {
		return nil, nil, err
	}
	if p.packing != spindle.EEPack {
		return nil, nil, spindle.E(spindle.Invalid, fmt.Sprintf("%v packing has no wrapped keys to share", p.packing))
	}
	key, err := unwrapFileKey(p, keys)
	if err != nil {
		return nil, nil, err
	}
	wraps, err := wrapFor(key, p.commitment, readers, p.wraps)
	if err != nil {
		return nil, nil, err
	}
	return p, wraps, nil
}

// WrappedKeys returns the hashes ([spindle.KeyHash]) of the public keys
// for which entry's file key is wrapped, in increasing order. It is empty
// for plain and eeintegrity entries. Errors are Integrity.
func WrappedKeys(entry *spindle.DirEntry) ([][32]byte, error) {
	const op spindle.Op = "pack.WrappedKeys"
	p, err := unmarshalPackdata(entry.Packdata)
	if err != nil {
		return nil, spindle.E(op, entry.Name, spindle.Integrity, fmt.Errorf("packdata: %v", err))
	}
	hashes := make([][32]byte, len(p.wraps))
	for i, w := range p.wraps {
		hashes[i] = w.keyHash
	}
	return hashes, nil
}

// Resign renames entry to newName and makes signer its writer, signing it
// anew. The blocks, the wraps and the ee key commitment are kept, so a
// user who cannot read the file (a rename by a user with write rights
// only) can still move it: the signature covers the commitment, never the
// key. Resign checks the entry's structure but not its old signature,
// which the caller verified when it looked the entry up. On error entry is
// unchanged.
func Resign(entry *spindle.DirEntry, newName spindle.PathName, signer spindle.Signer) error {
	const op spindle.Op = "pack.Resign"
	if clean, err := spindle.Clean(newName); err != nil || clean != newName {
		return spindle.E(op, newName, spindle.Invalid, "new name is not a clean path name")
	}
	p, _, _, err := decodeEntry(entry)
	if err != nil {
		return spindle.E(op, entry.Name, err)
	}
	e := *entry
	e.Name = newName
	e.SignedName = ""
	if err := sign(&e, p, signer); err != nil {
		return spindle.E(op, newName, err)
	}
	*entry = e
	return nil
}
