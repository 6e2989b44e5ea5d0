package dirlog

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"

	"spindle.dev"
)

const headContext = "spindle.dev/dirlog head v1\n"

// A Head is the state of one user's log as a dir host vouches for it: the
// sequence number and hash of its last entry, signed by the host. A reader
// that remembers the newest head it has seen for a user detects a rollback
// (an older sequence number) and a fork (two hashes for one sequence
// number) with [Head.Verify] and [CheckHead].
type Head struct {
	User    spindle.UserName
	Seq     int64
	Hash    Hash
	Host    spindle.UserName  // Who signed; empty if unsigned.
	HostKey spindle.PublicKey // The key that signed.
	Sig     spindle.Signature
}

// Digest returns the digest the host signs: the SHA-256 of a context
// string, the user, the sequence number and the hash.
func (h *Head) Digest() []byte {
	b := []byte(headContext)
	b = appendString(b, string(h.User))
	b = binary.BigEndian.AppendUint64(b, uint64(h.Seq))
	b = append(b, h.Hash[:]...)
	b = appendString(b, string(h.Host))
	sum := sha256.Sum256(b)
	return sum[:]
}

// Sign signs the head as host s.
func (h *Head) Sign(s spindle.Signer) error {
	h.Host, h.HostKey = s.UserName(), s.PublicKey()
	sig, err := s.Sign(h.Digest())
	if err != nil {
		return spindle.E(spindle.Op("dirlog.Head.Sign"), h.User, err)
	}
	h.Sig = sig
	return nil
}

// Verify checks that h is signed with key, which the caller has learnt to
// belong to one of the user's dir hosts. A bad signature is Integrity.
func (h *Head) Verify(key spindle.PublicKey) error {
	const op spindle.Op = "dirlog.Head.Verify"
	if len(h.Sig) == 0 {
		return spindle.E(op, spindle.Integrity, h.User, "head is not signed")
	}
	if err := spindle.Verify(key, h.Digest(), h.Sig); err != nil {
		return spindle.E(op, h.User, err)
	}
	return nil
}

// CheckHead compares a newly received head with the newest one a reader
// has seen for the same user (nil if none). It returns an error of kind
// Integrity, naming both heads as evidence, if the new head is older (a
// rollback) or has the same sequence number and another hash (a fork).
// A reader keeps whichever of the two has the higher sequence number.
func CheckHead(seen, got *Head) error {
	const op spindle.Op = "dirlog.CheckHead"
	if seen == nil {
		return nil
	}
	if seen.User != got.User {
		return spindle.E(op, spindle.Invalid, got.User, "heads of different users: "+string(seen.User))
	}
	switch {
	case got.Seq < seen.Seq:
		return spindle.E(op, spindle.Integrity, got.User, fmt.Sprintf("rollback: %s offers the log at sequence %d (%s), already saw %d (%s) from %s", from(got), got.Seq, got.Hash, seen.Seq, seen.Hash, from(seen)))
	case got.Seq == seen.Seq && got.Hash != seen.Hash:
		return spindle.E(op, spindle.Integrity, got.User, fmt.Sprintf("fork at sequence %d: %s from %s, %s from %s", got.Seq, got.Hash, from(got), seen.Hash, from(seen)))
	}
	return nil
}

// from names who vouched for a head.
func from(h *Head) string {
	if h.Host == "" {
		return "the dir host (unsigned)"
	}
	return "host " + string(h.Host)
}

const headMagic = "SPDLH1"

// Marshal returns the canonical encoding of the head, signature included,
// for travel between peers and for publishing.
func (h *Head) Marshal() []byte {
	b := append([]byte(nil), headMagic...)
	b = appendString(b, string(h.User))
	b = binary.BigEndian.AppendUint64(b, uint64(h.Seq))
	b = append(b, h.Hash[:]...)
	b = appendString(b, string(h.Host))
	b = appendString(b, string(h.HostKey))
	return appendBytes(b, h.Sig)
}

// UnmarshalHead decodes a head encoded by [Head.Marshal]. It checks the
// structure only; use [Head.Verify] for the signature. Errors are Invalid.
func UnmarshalHead(data []byte) (*Head, error) {
	const op spindle.Op = "dirlog.UnmarshalHead"
	d := decoder{b: data}
	if string(d.take(len(headMagic), "magic")) != headMagic {
		d.fail("bad magic")
	}
	h := &Head{}
	h.User = spindle.UserName(d.string(spindle.MaxUserNameLen, "user"))
	h.Seq = int64(d.u64("sequence"))
	copy(h.Hash[:], d.take(len(h.Hash), "hash"))
	h.Host = spindle.UserName(d.string(spindle.MaxUserNameLen, "host"))
	h.HostKey = spindle.PublicKey(d.string(maxKeyLen, "host key"))
	h.Sig = d.bytes(MaxSignature, "signature")
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d trailing bytes", len(d.b))
	}
	if d.err == nil && h.Seq < 0 {
		d.fail("negative sequence %d", h.Seq)
	}
	if d.err != nil {
		return nil, spindle.E(op, spindle.Invalid, fmt.Errorf("malformed head: %w", d.err))
	}
	return h, nil
}
