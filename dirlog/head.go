package dirlog

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"slices"

	"spindle.dev"
)

// headContext begins the digest a host signs. Version 1 heads (before the
// map root and time) are no longer signed or accepted; version 2 heads
// (before the log root) are read, from a reader's store, as a floor only.
const (
	headContext   = "spindle.dev/dirlog head v3\n"
	headContextV2 = "spindle.dev/dirlog head v2\n"
)

// A Head is the state of one user's log as a dir host vouches for it: the
// sequence number and hash of its last entry, and the root of the tree map
// at that point (see [MapRoot]), signed by the host. A reader that
// remembers the newest head it has seen for a user detects a rollback (an
// older sequence number) and a fork (two hashes for one sequence number)
// with [Head.Verify] and [CheckHead]; an owner, mirror or auditor holding
// the log checks Root with [MapRoot], and a reader checks proofs against
// it (see [MapProof]).
type Head struct {
	User spindle.UserName
	Seq  int64
	Hash Hash
	Root Hash // Root of the tree map after entry Seq.
	// LogRoot is the root of the Merkle tree of the log's first Seq
	// entries (see [LogTree]): a reader that saw an earlier head checks
	// with [CheckStep] that this one extends it.
	LogRoot Hash
	Time    spindle.Time // When the host signed the head.
	// Host names the dir host that signed, as the user's key record
	// lists it (a node's peer ID); empty if unsigned. HostKey is the
	// public key that verifies the signature, in the form the host's
	// kind of name binds (for a peer ID, a libp2p public key).
	Host    string
	HostKey []byte
	Sig     spindle.Signature
	// Cosigs are the cosignatures of other dir hosts of the user, each
	// of which replayed the log and found this head's sequence, hash,
	// map root and log root (see [Head.Cosign]); a key record's
	// DirQuorum says how many a reader needs ([Head.VerifyCosigs]).
	// Digest does not cover them: they are added after signing.
	Cosigs []Cosig
	// v2 marks a head decoded from the version 2 encoding, which has no
	// log root; it verifies and re-encodes as version 2.
	v2 bool
}

// HasLogRoot reports whether the head commits to a log root: false for a
// head decoded from the version 2 encoding, and for one made without (a
// client's record of its own append, a host's head of a tree folded from
// a checkpoint that carries no log tree), whose LogRoot is zero. The
// empty log's root is zero.
func (h *Head) HasLogRoot() bool { return !h.v2 && (h.Seq == 0 || !h.LogRoot.IsZero()) }

// A Cosig is one dir host's cosignature of a head: Host and HostKey name
// the cosigner as [Head.Host] and [Head.HostKey] name the signer, and Sig
// is its signature of [Head.CosignDigest].
type Cosig struct {
	Host    string
	HostKey []byte
	Sig     spindle.Signature
}

// maxCosigs bounds the cosignatures of one head: a key record lists at
// most 16 dir hosts.
const maxCosigs = 16

// A HeadSigner signs heads as a dir host.
type HeadSigner interface {
	// HostID is the host's name as key records list it: for a node, its
	// peer ID.
	HostID() string
	// HostKey is the public key that verifies the host's signatures.
	HostKey() []byte
	Sign(digest []byte) (spindle.Signature, error)
}

// A HeadVerifier decides whether a head's signer may vouch for a user's
// log: that host is one of the user's dir hosts, that key is host's, and
// that sig is key's signature of digest. A reader makes one from the
// user's key record.
type HeadVerifier interface {
	VerifyHead(user spindle.UserName, host string, key, digest, sig []byte) error
}

// Digest returns the digest the host signs: the SHA-256 of a context
// string, the user, the sequence number, the hash, the map root, the log
// root, the time and the host.
func (h *Head) Digest() []byte {
	b := []byte(headContext)
	if h.v2 {
		b = []byte(headContextV2)
	}
	b = appendString(b, string(h.User))
	b = binary.BigEndian.AppendUint64(b, uint64(h.Seq))
	b = append(b, h.Hash[:]...)
	b = append(b, h.Root[:]...)
	if !h.v2 {
		b = append(b, h.LogRoot[:]...)
	}
	b = binary.BigEndian.AppendUint64(b, uint64(h.Time))
	b = appendString(b, string(h.Host))
	sum := sha256.Sum256(b)
	return sum[:]
}

// cosigContext begins the digest a cosigner signs, so that a cosignature
// is never a head's signature nor the other way round.
const cosigContext = "spindle.dev/dirlog head cosignature v1\n"

// CosignDigest returns the digest host signs to cosign the head: the
// SHA-256 of a context string of its own, the head's [Head.Digest] and
// the cosigning host.
func (h *Head) CosignDigest(host string) []byte {
	b := append([]byte(cosigContext), h.Digest()...)
	b = appendString(b, host)
	sum := sha256.Sum256(b)
	return sum[:]
}

// Cosign returns s's cosignature of the head, which the caller adds to
// Cosigs. The cosigner must first have checked the head against its own
// replay of the log: the cosignature says it did.
func (h *Head) Cosign(s HeadSigner) (Cosig, error) {
	c := Cosig{Host: s.HostID(), HostKey: s.HostKey()}
	sig, err := s.Sign(h.CosignDigest(c.Host))
	if err != nil {
		return Cosig{}, spindle.E(spindle.Op("dirlog.Head.Cosign"), h.User, err)
	}
	c.Sig = sig
	return c, nil
}

// VerifyCosigs checks that at least quorum of h's cosignatures are valid
// ones, by distinct hosts other than h's signer that v accepts as the
// user's dir hosts. It does not check h's own signature ([Head.Verify]).
// A quorum of 0 or less needs none. Every failure is Integrity.
func (h *Head) VerifyCosigs(v HeadVerifier, quorum int) error {
	const op spindle.Op = "dirlog.Head.VerifyCosigs"
	if quorum <= 0 {
		return nil
	}
	if len(h.Cosigs) > maxCosigs {
		return spindle.E(op, spindle.Integrity, h.User, fmt.Sprintf("head of sequence %d has %d cosignatures, more than %d", h.Seq, len(h.Cosigs), maxCosigs))
	}
	var good []string
	var bad error
	for _, c := range h.Cosigs {
		if c.Host == h.Host || slices.Contains(good, c.Host) {
			continue
		}
		if err := v.VerifyHead(h.User, c.Host, c.HostKey, h.CosignDigest(c.Host), c.Sig); err != nil {
			bad = fmt.Errorf("cosignature by %s: %w", c.Host, err)
			continue
		}
		good = append(good, c.Host)
	}
	if len(good) >= quorum {
		return nil
	}
	msg := fmt.Sprintf("head of sequence %d signed by %s has %d valid cosignatures by the user's other dir hosts; the key record asks for %d", h.Seq, from(h), len(good), quorum)
	if bad != nil {
		return spindle.E(op, spindle.Integrity, h.User, fmt.Errorf("%s: %w", msg, bad))
	}
	return spindle.E(op, spindle.Integrity, h.User, msg)
}

// Sign signs the head as host s.
func (h *Head) Sign(s HeadSigner) error {
	h.v2 = false
	h.Host, h.HostKey = s.HostID(), s.HostKey()
	sig, err := s.Sign(h.Digest())
	if err != nil {
		return spindle.E(spindle.Op("dirlog.Head.Sign"), h.User, err)
	}
	h.Sig = sig
	return nil
}

// Verify checks that h is signed by a host v accepts for h.User. Every
// failure is Integrity.
func (h *Head) Verify(v HeadVerifier) error {
	const op spindle.Op = "dirlog.Head.Verify"
	if len(h.Sig) == 0 || h.Host == "" {
		return spindle.E(op, spindle.Integrity, h.User, "head is not signed by a dir host")
	}
	if err := v.VerifyHead(h.User, h.Host, h.HostKey, h.Digest(), h.Sig); err != nil {
		return spindle.E(op, spindle.Integrity, h.User, fmt.Errorf("head of sequence %d signed by %s: %w", h.Seq, h.Host, err))
	}
	return nil
}

// CheckHead compares a newly received head with the newest one a reader
// has seen for the same user (nil if none). It returns an error of kind
// Integrity, naming both heads as evidence, if the new head is older (a
// rollback), has the same sequence number and another hash (a fork), or
// the same sequence number and another map root (a zero root, from a
// reader that kept none, is not compared).
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
		return spindle.E(op, spindle.Integrity, got.User, fmt.Sprintf("rollback: %s offers the log at sequence %d (%s), already saw %d (%s) from %s; "+
			"the host serves an older state of the tree: it lost entries (a damaged, repaired or restored log) or hides them. Read through another dir host of %s; "+
			"its operator sees in spin node status whether that host found the log damaged", from(got), got.Seq, got.Hash, seen.Seq, seen.Hash, from(seen), got.User))
	case got.Seq == seen.Seq && got.Hash != seen.Hash:
		return spindle.E(op, spindle.Integrity, got.User, fmt.Sprintf("fork at sequence %d: %s from %s, %s from %s", got.Seq, got.Hash, from(got), seen.Hash, from(seen)))
	case got.Seq == seen.Seq && !got.Root.IsZero() && !seen.Root.IsZero() && got.Root != seen.Root:
		// One log state has one map root: one of the two is a lie.
		return spindle.E(op, spindle.Integrity, got.User, fmt.Sprintf("two map roots for sequence %d (%s): %s from %s, %s from %s", got.Seq, got.Hash, got.Root, from(got), seen.Root, from(seen)))
	case got.Seq == seen.Seq && got.HasLogRoot() && seen.HasLogRoot() && got.LogRoot != seen.LogRoot:
		// One log has one Merkle tree: one of the two is a lie.
		return spindle.E(op, spindle.Integrity, got.User, fmt.Sprintf("two log roots for sequence %d (%s): %s from %s, %s from %s", got.Seq, got.Hash, got.LogRoot, from(got), seen.LogRoot, from(seen)))
	}
	return nil
}

// from names who vouched for a head.
func from(h *Head) string {
	if h.Host == "" {
		return "the dir host (unsigned)"
	}
	return "host " + h.Host
}

// maxHostLen bounds a host's name in a head: a peer ID's text is about
// 52 bytes, a multiaddr a few hundred.
const maxHostLen = 1 << 10

const (
	headMagicV4 = "SPDLH4" // Version 3 followed by cosignatures.
	headMagic   = "SPDLH3"
	headMagicV2 = "SPDLH2" // Before log roots; read as a floor.
	headMagicV1 = "SPDLH1" // Before map roots; refused.
)

// Marshal returns the canonical encoding of the head, signature included,
// for travel between peers and for publishing. A head with cosignatures
// is encoded as version 4, which is version 3 followed by their count and
// each one's host, host key and signature; a head without keeps the
// version 3 encoding. A version 2 head carries no cosignatures.
func (h *Head) Marshal() []byte {
	magic := headMagic
	cosigs := len(h.Cosigs) > 0 && !h.v2
	switch {
	case h.v2:
		magic = headMagicV2
	case cosigs:
		magic = headMagicV4
	}
	b := append([]byte(nil), magic...)
	b = appendString(b, string(h.User))
	b = binary.BigEndian.AppendUint64(b, uint64(h.Seq))
	b = append(b, h.Hash[:]...)
	b = append(b, h.Root[:]...)
	if !h.v2 {
		b = append(b, h.LogRoot[:]...)
	}
	b = binary.BigEndian.AppendUint64(b, uint64(h.Time))
	b = appendString(b, string(h.Host))
	b = appendString(b, string(h.HostKey))
	b = appendBytes(b, h.Sig)
	if cosigs {
		b = append(b, byte(len(h.Cosigs)))
		for _, c := range h.Cosigs {
			b = appendString(b, c.Host)
			b = appendString(b, string(c.HostKey))
			b = appendBytes(b, c.Sig)
		}
	}
	return b
}

// UnmarshalHead decodes a head encoded by [Head.Marshal]. It checks the
// structure only; use [Head.Verify] for the signature. Errors are Invalid;
// a head in the encoding of version 1, which did not commit to the tree,
// is refused as such. A head in the encoding of version 2 decodes with no
// log root ([Head.HasLogRoot] is false): a reader's stored floor, which
// [CheckStep] refuses to step from; an answer's head must be of version 3
// or 4 (version 3 with cosignatures, at least one).
func UnmarshalHead(data []byte) (*Head, error) {
	const op spindle.Op = "dirlog.UnmarshalHead"
	d := decoder{b: data}
	h := &Head{}
	var cosigs bool
	switch magic := string(d.take(len(headMagic), "magic")); magic {
	case headMagicV4:
		cosigs = true
	case headMagic:
	case headMagicV2:
		h.v2 = true
	case headMagicV1:
		return nil, spindle.E(op, spindle.Invalid, "head is in version 1 encoding, which commits to no tree map; the host must be upgraded")
	default:
		d.fail("bad magic")
	}
	h.User = spindle.UserName(d.string(spindle.MaxUserNameLen, "user"))
	h.Seq = int64(d.u64("sequence"))
	copy(h.Hash[:], d.take(len(h.Hash), "hash"))
	copy(h.Root[:], d.take(len(h.Root), "map root"))
	if !h.v2 {
		copy(h.LogRoot[:], d.take(len(h.LogRoot), "log root"))
	}
	h.Time = spindle.Time(d.u64("time"))
	h.Host = d.string(maxHostLen, "host")
	h.HostKey = []byte(d.string(maxKeyLen, "host key"))
	h.Sig = d.bytes(MaxSignature, "signature")
	if cosigs {
		n := int(d.u8("cosignatures"))
		if d.err == nil && (n == 0 || n > maxCosigs) {
			d.fail("%d cosignatures in version 4, want 1 to %d", n, maxCosigs)
		}
		for i := 0; i < n && d.err == nil; i++ {
			var c Cosig
			c.Host = d.string(maxHostLen, "cosigner")
			c.HostKey = []byte(d.string(maxKeyLen, "cosigner key"))
			c.Sig = d.bytes(MaxSignature, "cosignature")
			h.Cosigs = append(h.Cosigs, c)
		}
	}
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
