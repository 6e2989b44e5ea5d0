package keylog

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
	"unicode"

	"golang.org/x/mod/sumdb/tlog"

	"spindle.dev"
)

// Limits on a key record. A record that exceeds one is Invalid.
const (
	MaxPins         = 16       // Named snapshots in one record.
	MaxPinNameLen   = 64       // Bytes in a snapshot's name.
	MaxDirHosts     = 16       // Dir hosts named in one record.
	MaxPeerAddrLen  = 512      // Bytes in one dir host address.
	MaxSignatureLen = 128      // Bytes in a signature (a P-256 DER signature is at most 72).
	MaxRecordSize   = 16 << 10 // Bytes in an encoded record.
)

// HashSize is the size of a record hash, as carried in [spindle.User.Prev].
const HashSize = tlog.HashSize

// signingDomain separates record signatures from every other use of a user's key.
const signingDomain = "spindle.dev/keyraft signed record v1\n"

// recordMagic starts an encoded record; recordMagicDirSeq starts one
// with a DirSeq, which follows SignedBy as 8 bytes big-endian. A record
// with DirSeq 0 keeps the first form, so records made before DirSeq
// existed keep their encoding, hash and signature. recordMagicDirQuorum
// starts one with a DirQuorum: DirSeq (which may then be 0) and DirQuorum
// follow SignedBy, 8 bytes big-endian each, so records made before
// DirQuorum existed keep theirs too. recordMagicKeep starts one with a
// Keep or Pins: DirSeq, DirQuorum and Keep (any may be 0) follow, 8 bytes
// big-endian each, then the pins' count as a uvarint and each pin's name
// (length-prefixed) and sequence (8 bytes big-endian).
const (
	recordMagic          = "SPKR\x01"
	recordMagicDirSeq    = "SPKR\x02"
	recordMagicDirQuorum = "SPKR\x03"
	recordMagicKeep      = "SPKR\x04"
)

// signingDomainDirSeq is signingDomain for records with a DirSeq, and
// signingDomainDirQuorum for records with a DirQuorum.
const (
	signingDomainDirSeq    = "spindle.dev/keyraft signed record v2\n"
	signingDomainDirQuorum = "spindle.dev/keyraft signed record v3\n"
	signingDomainKeep      = "spindle.dev/keyraft signed record v4\n"
)

// SigningDigest returns the SHA-256 digest that a key record's signer signs:
// a domain-separation string followed by the record's Name, PublicKey,
// DirHosts, Version, Prev and SignedBy, each string or byte field prefixed by
// its length as a uvarint, the dir host list by its count, and the version as
// 8 bytes big-endian; a record with a DirSeq has its own domain string and
// DirSeq follows, 8 bytes big-endian; a record with a DirQuorum has a third
// domain string, and DirSeq and DirQuorum follow, 8 bytes big-endian each;
// a record with a Keep has a fourth, and DirSeq, DirQuorum and Keep follow.
// The signature itself is not covered.
// Verify the result with spindle.Verify(key, SigningDigest(u), u.Signature).
func SigningDigest(u *spindle.User) []byte {
	domain := signingDomain
	switch {
	case v4(u):
		domain = signingDomainKeep
	case u.DirQuorum != 0:
		domain = signingDomainDirQuorum
	case u.DirSeq != 0:
		domain = signingDomainDirSeq
	}
	b := appendBody(append(make([]byte, 0, len(domain)+encodedLen(u)), domain...), u)
	sum := sha256.Sum256(b)
	return sum[:]
}

func appendBody(b []byte, u *spindle.User) []byte {
	b = appendString(b, string(u.Name))
	b = appendString(b, string(u.PublicKey))
	b = binary.AppendUvarint(b, uint64(len(u.DirHosts)))
	for _, h := range u.DirHosts {
		b = appendString(b, string(h))
	}
	b = binary.BigEndian.AppendUint64(b, uint64(u.Version))
	b = appendString(b, string(u.Prev))
	b = appendString(b, string(u.SignedBy))
	if u.DirSeq != 0 || u.DirQuorum != 0 || v4(u) {
		b = binary.BigEndian.AppendUint64(b, uint64(u.DirSeq))
	}
	if u.DirQuorum != 0 || v4(u) {
		b = binary.BigEndian.AppendUint64(b, uint64(u.DirQuorum))
	}
	if v4(u) {
		b = binary.BigEndian.AppendUint64(b, uint64(u.Keep))
		b = binary.AppendUvarint(b, uint64(len(u.Pins)))
		for _, p := range u.Pins {
			b = appendString(b, p.Name)
			b = binary.BigEndian.AppendUint64(b, uint64(p.Seq))
		}
	}
	return b
}

// encodedLen returns len(EncodeRecord(u)) without encoding it.
func encodedLen(u *spindle.User) int {
	n := len(recordMagic) + stringLen(len(u.Name)) + stringLen(len(u.PublicKey)) +
		uvarintLen(uint64(len(u.DirHosts))) + 8 + stringLen(len(u.Prev)) +
		stringLen(len(u.SignedBy)) + stringLen(len(u.Signature))
	for _, h := range u.DirHosts {
		n += stringLen(len(h))
	}
	if u.DirSeq != 0 || u.DirQuorum != 0 || v4(u) {
		n += 8
	}
	if u.DirQuorum != 0 || v4(u) {
		n += 8
	}
	if v4(u) {
		n += 8 + uvarintLen(uint64(len(u.Pins)))
		for _, p := range u.Pins {
			n += stringLen(len(p.Name)) + 8
		}
	}
	return n
}

// v4 reports whether u needs the fourth form: a Keep or Pins.
func v4(u *spindle.User) bool { return u.Keep != 0 || len(u.Pins) > 0 }

// stringLen is the length of a string of n bytes as appendString encodes it.
func stringLen(n int) int { return uvarintLen(uint64(n)) + n }

func uvarintLen(x uint64) int {
	n := 1
	for ; x >= 0x80; x >>= 7 {
		n++
	}
	return n
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// EncodeRecord returns the canonical encoding of a key record, signature
// included: the form in which records travel, are replicated and are
// appended to the transparency log. [DecodeRecord] reverses it.
func EncodeRecord(u *spindle.User) []byte {
	magic := recordMagic
	switch {
	case v4(u):
		magic = recordMagicKeep
	case u.DirQuorum != 0:
		magic = recordMagicDirQuorum
	case u.DirSeq != 0:
		magic = recordMagicDirSeq
	}
	b := appendBody(append(make([]byte, 0, encodedLen(u)), magic...), u)
	return appendString(b, string(u.Signature))
}

// RecordHash returns the hash of a key record: the hash of its leaf in the
// transparency log, and the value the next version carries in Prev.
func RecordHash(u *spindle.User) []byte {
	h := tlog.RecordHash(EncodeRecord(u))
	return h[:]
}

// DecodeRecord decodes a record encoded by [EncodeRecord] and checks that it
// is well formed (see [CheckRecord]). Bytes that are not exactly such an
// encoding, including non-canonical ones, are Invalid. DecodeRecord is safe
// on untrusted input.
func DecodeRecord(data []byte) (*spindle.User, error) {
	const op spindle.Op = "keylog.DecodeRecord"
	u, err := decodeRecord(data)
	if err != nil {
		return nil, spindle.E(op, spindle.Invalid, fmt.Errorf("malformed record: %w", err))
	}
	if err := checkRecord(u); err != nil {
		return nil, spindle.E(op, err)
	}
	return u, nil
}

func decodeRecord(data []byte) (*spindle.User, error) {
	if len(data) > MaxRecordSize {
		return nil, fmt.Errorf("%d bytes, more than %d", len(data), MaxRecordSize)
	}
	var withDirSeq, withDirQuorum, withKeep bool
	switch {
	case bytes.HasPrefix(data, []byte(recordMagic)):
	case bytes.HasPrefix(data, []byte(recordMagicDirSeq)):
		withDirSeq = true
	case bytes.HasPrefix(data, []byte(recordMagicDirQuorum)):
		withDirQuorum = true
	case bytes.HasPrefix(data, []byte(recordMagicKeep)):
		withKeep = true
	default:
		return nil, errors.New("bad magic")
	}
	d := decoder{data: data[len(recordMagic):]}
	u := new(spindle.User)
	u.Name = spindle.UserName(d.string(spindle.MaxUserNameLen))
	u.PublicKey = spindle.PublicKey(d.string(256))
	n := d.uvarint()
	if n > MaxDirHosts {
		return nil, fmt.Errorf("%d dir hosts, more than %d", n, MaxDirHosts)
	}
	for i := uint64(0); i < n && d.err == nil; i++ {
		u.DirHosts = append(u.DirHosts, spindle.PeerAddr(d.string(MaxPeerAddrLen)))
	}
	v := d.uint64()
	if v > math.MaxInt64 {
		return nil, errors.New("version out of range")
	}
	u.Version = int64(v)
	if p := d.string(HashSize); p != "" {
		u.Prev = []byte(p)
	}
	u.SignedBy = spindle.UserName(d.string(spindle.MaxUserNameLen))
	if withDirSeq {
		v := d.uint64()
		if v == 0 || v > math.MaxInt64 {
			return nil, errors.New("dir sequence out of range")
		}
		u.DirSeq = int64(v)
	}
	if withDirQuorum {
		v := d.uint64()
		if v > math.MaxInt64 {
			return nil, errors.New("dir sequence out of range")
		}
		u.DirSeq = int64(v)
		if q := d.uint64(); q == 0 || q > MaxDirHosts {
			return nil, errors.New("dir quorum out of range")
		} else {
			u.DirQuorum = int(q)
		}
	}
	if withKeep {
		s, q, k := d.uint64(), d.uint64(), int64(d.uint64())
		if s > math.MaxInt64 {
			return nil, errors.New("dir sequence out of range")
		}
		if q > MaxDirHosts {
			return nil, errors.New("dir quorum out of range")
		}
		if k < spindle.KeepNone {
			return nil, errors.New("keep out of range")
		}
		u.DirSeq, u.DirQuorum, u.Keep = int64(s), int(q), k
		n := d.uvarint()
		if n > MaxPins {
			return nil, fmt.Errorf("%d named snapshots, more than %d", n, MaxPins)
		}
		for i := uint64(0); i < n && d.err == nil; i++ {
			name := d.string(MaxPinNameLen)
			seq := d.uint64()
			if seq == 0 || seq > math.MaxInt64 {
				return nil, errors.New("snapshot sequence out of range")
			}
			u.Pins = append(u.Pins, spindle.Pin{Name: name, Seq: int64(seq)})
		}
	}
	if s := d.string(MaxSignatureLen); s != "" {
		u.Signature = spindle.Signature(s)
	}
	if d.err != nil {
		return nil, d.err
	}
	if len(d.data) != 0 {
		return nil, errors.New("trailing bytes")
	}
	if !bytes.Equal(EncodeRecord(u), data) {
		return nil, errors.New("non-canonical encoding")
	}
	return u, nil
}

// CheckRecord reports whether a record is well formed on its own, without
// regard to the cluster's state: a valid canonical user name other than
// spindle.AllUsers, a canonical P-256 public key, at most MaxDirHosts
// distinct dir hosts of at most MaxPeerAddrLen printable bytes each, a
// positive version, a Prev of HashSize bytes exactly when the version is
// above 1, a DirQuorum of at least 0 and fewer than the dir hosts, a signer that is the user or (for a +suffix user) its base user,
// and a non-empty signature of at most MaxSignatureLen bytes. Every failure
// is Invalid.
func CheckRecord(u *spindle.User) error {
	const op spindle.Op = "keylog.CheckRecord"
	if err := checkRecord(u); err != nil {
		return spindle.E(op, err)
	}
	return nil
}

func checkRecord(u *spindle.User) error {
	if u == nil {
		return spindle.E(spindle.Invalid, "nil record")
	}
	canon, err := spindle.CleanUser(u.Name)
	if err != nil {
		return spindle.E(spindle.Invalid, u.Name, err)
	}
	if canon != u.Name {
		return spindle.E(spindle.Invalid, u.Name, "user name is not canonical; want "+string(canon))
	}
	if u.Name == spindle.AllUsers {
		return spindle.E(spindle.Invalid, u.Name, "reserved user name")
	}
	pub, err := spindle.ParsePublicKey(u.PublicKey)
	if err != nil {
		return spindle.E(spindle.Invalid, u.Name, err)
	}
	if k, err := spindle.FormatPublicKey(pub); err != nil || k != u.PublicKey {
		return spindle.E(spindle.Invalid, u.Name, "public key is not in canonical form")
	}
	if len(u.DirHosts) > MaxDirHosts {
		return spindle.E(spindle.Invalid, u.Name, fmt.Sprintf("%d dir hosts, more than %d", len(u.DirHosts), MaxDirHosts))
	}
	for i, h := range u.DirHosts {
		if err := checkPeerAddr(h); err != nil {
			return spindle.E(spindle.Invalid, u.Name, fmt.Errorf("dir host %d: %w", i, err))
		}
		for _, g := range u.DirHosts[:i] {
			if g == h {
				return spindle.E(spindle.Invalid, u.Name, fmt.Errorf("dir host %q listed twice", h))
			}
		}
	}
	switch {
	case u.Version < 1:
		return spindle.E(spindle.Invalid, u.Name, fmt.Sprintf("version %d; versions start at 1", u.Version))
	case u.Version == 1 && len(u.Prev) != 0:
		return spindle.E(spindle.Invalid, u.Name, "version 1 has a previous-record hash")
	case u.Version > 1 && len(u.Prev) != HashSize:
		return spindle.E(spindle.Invalid, u.Name, fmt.Sprintf("previous-record hash has %d bytes, want %d", len(u.Prev), HashSize))
	case u.DirSeq < 0 || u.Version == 1 && u.DirSeq != 0:
		return spindle.E(spindle.Invalid, u.Name, fmt.Sprintf("dir sequence %d in version %d", u.DirSeq, u.Version))
	case u.DirQuorum < 0 || u.DirQuorum > 0 && u.DirQuorum >= len(u.DirHosts):
		return spindle.E(spindle.Invalid, u.Name, fmt.Sprintf("dir quorum %d with %d dir hosts; it counts the hosts other than a head's signer", u.DirQuorum, len(u.DirHosts)))
	case u.Keep < spindle.KeepNone:
		return spindle.E(spindle.Invalid, u.Name, fmt.Sprintf("keep %d: a number of seconds, 0 for the hosts' default or -1 for none", u.Keep))
	case len(u.Pins) > MaxPins:
		return spindle.E(spindle.Invalid, u.Name, fmt.Sprintf("%d named snapshots, more than %d", len(u.Pins), MaxPins))
	}
	for i, p := range u.Pins {
		if err := CheckPinName(p.Name); err != nil {
			return spindle.E(spindle.Invalid, u.Name, err)
		}
		if p.Seq <= 0 {
			return spindle.E(spindle.Invalid, u.Name, fmt.Sprintf("snapshot %q at sequence %d", p.Name, p.Seq))
		}
		if i > 0 && u.Pins[i-1].Name >= p.Name {
			return spindle.E(spindle.Invalid, u.Name, fmt.Sprintf("snapshots %q and %q are not in name order, or named twice", u.Pins[i-1].Name, p.Name))
		}
	}
	if u.SignedBy != u.Name && u.SignedBy != spindle.BaseUser(u.Name) {
		return spindle.E(spindle.Invalid, u.Name, fmt.Sprintf("signer %q is neither the user nor its base user", u.SignedBy))
	}
	if len(u.Signature) == 0 {
		return spindle.E(spindle.Invalid, u.Name, "record is not signed")
	}
	if len(u.Signature) > MaxSignatureLen {
		return spindle.E(spindle.Invalid, u.Name, fmt.Sprintf("signature of %d bytes, more than %d", len(u.Signature), MaxSignatureLen))
	}
	if n := encodedLen(u); n > MaxRecordSize {
		return spindle.E(spindle.Invalid, u.Name, fmt.Sprintf("record of %d bytes, more than %d", n, MaxRecordSize))
	}
	return nil
}

// CheckPinName reports whether name may name a snapshot: 1 to
// MaxPinNameLen letters, digits, '.', '_' and '-', starting with a letter
// or digit, and not a number (which -at WHEN reads as a sequence).
func CheckPinName(name string) error {
	if name == "" || len(name) > MaxPinNameLen {
		return fmt.Errorf("snapshot name %q: want 1 to %d characters", name, MaxPinNameLen)
	}
	for i, r := range name {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || i > 0 && (r == '.' || r == '_' || r == '-')
		if !ok {
			return fmt.Errorf("snapshot name %q: want letters, digits, '.', '_' and '-', starting with a letter or digit", name)
		}
	}
	if strings.Trim(name, "0123456789") == "" {
		return fmt.Errorf("snapshot name %q is a number, which -at reads as a sequence", name)
	}
	return nil
}

func checkPeerAddr(h spindle.PeerAddr) error {
	if h == "" {
		return errors.New("empty address")
	}
	if len(h) > MaxPeerAddrLen {
		return fmt.Errorf("address of %d bytes, more than %d", len(h), MaxPeerAddrLen)
	}
	if i := strings.IndexFunc(string(h), func(r rune) bool {
		return r > unicode.MaxASCII || !unicode.IsPrint(r) || r == ' '
	}); i >= 0 {
		return fmt.Errorf("address %q holds a space, control or non-ASCII character", h)
	}
	return nil
}

// Sign fills in u.SignedBy and u.Signature, signing the record with s, which
// must hold the key that the cluster's policy requires: the user's own key
// for a new record, the key of the record being replaced for an update, or
// the base user's current key for a +suffix user.
func Sign(u *spindle.User, s spindle.Signer) error {
	const op spindle.Op = "keylog.Sign"
	u.SignedBy = s.UserName()
	sig, err := s.Sign(SigningDigest(u))
	if err != nil {
		return spindle.E(op, u.Name, err)
	}
	u.Signature = sig
	return nil
}

// Next returns a copy of cur with the version advanced and Prev set to the
// hash of cur, unsigned: the starting point of an update to cur.
func Next(cur *spindle.User) *spindle.User {
	u := clone(cur)
	u.Version = cur.Version + 1
	u.Prev = RecordHash(cur)
	u.SignedBy = ""
	u.Signature = nil
	return u
}

// clone returns a deep copy of u.
func clone(u *spindle.User) *spindle.User {
	c := *u
	c.DirHosts = append([]spindle.PeerAddr(nil), u.DirHosts...)
	c.Prev = bytes.Clone(u.Prev)
	c.Pins = append([]spindle.Pin(nil), u.Pins...)
	c.Signature = bytes.Clone(u.Signature)
	return &c
}

// A Decoder reads fields of the binary encodings keylog defines, for
// encodings built on them (keyraft's batches of records and changes):
// uvarints in their shortest form and length-prefixed fields of bounded
// size. The first error sticks. It is safe on untrusted input.
type Decoder struct{ d decoder }

// NewDecoder returns a Decoder of data.
func NewDecoder(data []byte) *Decoder { return &Decoder{decoder{data: data}} }

// Uvarint reads an unsigned varint, which must be in its shortest form.
func (d *Decoder) Uvarint() uint64 { return d.d.uvarint() }

// Bytes reads a field of at most max bytes, prefixed with its length.
// The result aliases the data.
func (d *Decoder) Bytes(max int) []byte { return d.d.bytes(max) }

// Err returns the first error met, if any.
func (d *Decoder) Err() error { return d.d.err }

// Finish returns the first error met, or, if there was none, an error if
// data remains unread.
func (d *Decoder) Finish() error {
	if d.d.err == nil && len(d.d.data) != 0 {
		return errors.New("trailing bytes")
	}
	return d.d.err
}

// decoder reads the fields of the binary encodings. The first error sticks.
type decoder struct {
	data []byte
	err  error
}

func (d *decoder) fail(err error) {
	if d.err == nil {
		d.err = err
	}
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	n, k := binary.Uvarint(d.data)
	if k <= 0 {
		d.fail(errors.New("bad uvarint"))
		return 0
	}
	if k != len(binary.AppendUvarint(nil, n)) {
		// Every value has one encoding, so that decoding and encoding
		// again gives back the bytes that were signed or hashed.
		d.fail(errors.New("uvarint not in its shortest form"))
		return 0
	}
	d.data = d.data[k:]
	return n
}

func (d *decoder) uint64() uint64 {
	if d.err != nil {
		return 0
	}
	if len(d.data) < 8 {
		d.fail(errors.New("short data"))
		return 0
	}
	v := binary.BigEndian.Uint64(d.data)
	d.data = d.data[8:]
	return v
}

func (d *decoder) bytes(max int) []byte {
	n := d.uvarint()
	if d.err != nil {
		return nil
	}
	if n > uint64(max) {
		d.fail(fmt.Errorf("field of %d bytes, more than %d", n, max))
		return nil
	}
	if n > uint64(len(d.data)) {
		d.fail(errors.New("short data"))
		return nil
	}
	b := d.data[:n:n]
	d.data = d.data[n:]
	return b
}

func (d *decoder) string(max int) string { return string(d.bytes(max)) }
