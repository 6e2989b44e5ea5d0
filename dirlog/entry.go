package dirlog

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"

	"spindle.dev"
)

// An Operation is what a log entry does to its tree. The numbers are part of
// the stored format and never change.
type Operation uint8

// The operations.
const (
	OpPut    Operation = 1 // Create or replace a file (or an Access or Group file).
	OpDelete Operation = 2 // Remove a file, link or empty directory.
	OpMkdir  Operation = 3 // Create a directory; the first entry of a log makes the root.
	OpLink   Operation = 4 // Create or replace a link.
	OpRename Operation = 5 // Move a file, link or whole directory to NewName.
)

var opNames = map[Operation]string{
	OpPut:    "put",
	OpDelete: "delete",
	OpMkdir:  "mkdir",
	OpLink:   "link",
	OpRename: "rename",
}

// String returns the operation's name, such as "put".
func (o Operation) String() string {
	if s, ok := opNames[o]; ok {
		return s
	}
	return fmt.Sprintf("operation(%d)", uint8(o))
}

// Limits on an encoded entry. A decoder refuses anything larger, so that a
// damaged or hostile log cannot make a host allocate without bound.
const (
	MaxInline     = 64 << 10  // Bytes of Access or Group file text in DirEntry.Inline.
	MaxNameLen    = 8 << 10   // Bytes of a path name.
	MaxPackdata   = 1 << 20   // Bytes of DirEntry.Packdata.
	MaxBlocks     = 1 << 20   // Blocks of one file (1 TiB at 1 MiB a block).
	MaxSignature  = 256       // Bytes of a signature.
	MaxEntrySize  = 128 << 20 // Bytes of one encoded entry.
	maxRefLen     = 256       // Bytes of a block reference.
	maxDeps       = 1 << 12   // Other logs consulted for one decision.
	maxKeyLen     = 1 << 10   // Bytes of a public key's text form.
	entryMagic    = "SPDLE2"  // Starts every entry encoded now.
	entryMagicV1  = "SPDLE1"  // Starts entries of the first format (see Entry.Legacy).
	signedContext = "spindle.dev/dirlog entry signature v1\n"
	hashContext   = "spindle.dev/dirlog entry hash v1\n"
)

// A Hash identifies an entry: the SHA-256 of a fixed context string and the
// entry's full encoding, signature included. The zero Hash precedes the first
// entry of every log.
type Hash [32]byte

// String returns the hash in hexadecimal.
func (h Hash) String() string { return hex.EncodeToString(h[:]) }

// IsZero reports whether h is the zero hash.
func (h Hash) IsZero() bool { return h == Hash{} }

// An Entry is one signed operation in a user's log.
type Entry struct {
	Seq    int64            // Position in the log, from 1.
	Prev   Hash             // Hash of the entry at Seq-1; zero for the first.
	Time   spindle.Time     // When the writer made the entry.
	Writer spindle.UserName // Who signed it; must equal Entry.Writer.
	Op     Operation
	// Entry is the affected item. For put, mkdir and link it is the item
	// as it will be stored, and its Sequence must equal Seq. For delete and
	// rename only Name, Writer and Sequence are set; Name is the item
	// removed or moved.
	Entry   spindle.DirEntry
	NewName spindle.PathName // Destination of a rename; empty otherwise.
	// ReadersAt is the sequence number of the tree's head at which the
	// writer worked out the readers its file key is wrapped for (the
	// governing Access file and the Group files it names, as proved
	// against that head). A put of an encrypted file is valid only if
	// none of them changed after it (see [Tree.CheckOp]), so that no key
	// is wrapped for a reader the Access state of the write had removed.
	// It is below Seq.
	ReadersAt int64
	// KeyAt is the size of the key cluster's transparency log that the
	// writer's client had followed when it signed: the entry's anchor in
	// key time. A key its holder replaced signs only entries anchored
	// before the replacing record's place in that log (see
	// [HeldKey.Signs]), in every tree; a tree's anchors never decrease.
	KeyAt int64
	// Legacy is set on an entry decoded from the first format, which has
	// neither ReadersAt nor KeyAt (both are then zero): such entries in
	// existing logs still decode, verify and replay as they did. Only the
	// decoder sets it; a dir host appends no new legacy entry.
	Legacy bool
	Sig    spindle.Signature
}

// Tree returns the user whose tree the entry belongs to: the user part of
// Entry.Name.
func (e *Entry) Tree() spindle.UserName {
	p, err := spindle.Parse(e.Entry.Name)
	if err != nil {
		return ""
	}
	return p.User()
}

// NewNames returns the names e brings into its tree: the name of the file,
// directory or link it puts, a link's target, and a rename's destination.
// Only these must follow the rules for new names (see [CheckNewNames]); the
// name a delete removes or a rename moves may be one stored before the
// rules, so that its owner can still get rid of it.
func (e *Entry) NewNames() []spindle.PathName {
	return newNames(e.Op, &e.Entry, e.NewName)
}

func newNames(op Operation, d *spindle.DirEntry, newName spindle.PathName) []spindle.PathName {
	switch op {
	case OpPut, OpMkdir:
		return []spindle.PathName{d.Name}
	case OpLink:
		return []spindle.PathName{d.Name, d.Link}
	case OpRename:
		return []spindle.PathName{newName}
	}
	return nil
}

// CheckNewNames checks every name e brings into its tree (see
// [Entry.NewNames]) with [spindle.CheckName]. A dir host applies it to
// every entry it is asked to append, and a client before it signs one. It
// is not applied in replay: an entry valid when it was written stays valid.
func CheckNewNames(e *Entry) error {
	return checkNames(e.NewNames())
}

func checkNames(names []spindle.PathName) error {
	for _, n := range names {
		if err := spindle.CheckName(n); err != nil {
			return err
		}
	}
	return nil
}

// SignedDigest returns the digest the writer signs: the SHA-256 of a fixed
// context string and the canonical encoding of every field but Sig.
func (e *Entry) SignedDigest() []byte {
	h := sha256.New()
	h.Write([]byte(signedContext))
	h.Write(e.appendBody(nil))
	return h.Sum(nil)
}

// Sign signs the entry with s, setting Writer, Entry.Writer and Sig. The
// signer must be the writer.
func (e *Entry) Sign(s spindle.Signer) error {
	const op spindle.Op = "dirlog.Entry.Sign"
	e.Writer = s.UserName()
	e.Entry.Writer = e.Writer
	sig, err := s.Sign(e.SignedDigest())
	if err != nil {
		return spindle.E(op, e.Entry.Name, e.Writer, err)
	}
	e.Sig = sig
	return nil
}

// Hash returns the entry's hash, which the next entry names as Prev.
func (e *Entry) Hash() Hash {
	h := sha256.New()
	h.Write([]byte(hashContext))
	h.Write(e.Marshal())
	var out Hash
	h.Sum(out[:0])
	return out
}

// Marshal returns the canonical encoding of the entry, signature included.
// [UnmarshalEntry] accepts exactly the encodings Marshal produces.
func (e *Entry) Marshal() []byte {
	b := e.appendBody(nil)
	return appendBytes(b, e.Sig)
}

// appendBody appends the encoding of every field but Sig. Every integer has
// a fixed width and every string and byte slice a 32-bit length, so the
// encoding of a value is unique. A legacy entry is encoded in the first
// format, which ends before ReadersAt and KeyAt.
func (e *Entry) appendBody(b []byte) []byte {
	if e.Legacy {
		b = append(b, entryMagicV1...)
	} else {
		b = append(b, entryMagic...)
	}
	b = binary.BigEndian.AppendUint64(b, uint64(e.Seq))
	b = append(b, e.Prev[:]...)
	b = binary.BigEndian.AppendUint64(b, uint64(e.Time))
	b = appendString(b, string(e.Writer))
	b = append(b, byte(e.Op))
	d := &e.Entry
	b = appendString(b, string(d.Name))
	b = append(b, byte(d.Attr), byte(d.Packing))
	b = binary.BigEndian.AppendUint64(b, uint64(d.Time))
	b = binary.BigEndian.AppendUint64(b, uint64(d.Size))
	b = binary.BigEndian.AppendUint32(b, uint32(len(d.Blocks)))
	for _, bl := range d.Blocks {
		b = appendString(b, string(bl.Ref))
		b = binary.BigEndian.AppendUint64(b, uint64(bl.Offset))
		b = binary.BigEndian.AppendUint64(b, uint64(bl.Size))
	}
	b = appendBytes(b, d.Packdata)
	b = appendString(b, string(d.Link))
	b = appendBytes(b, d.Inline)
	b = appendString(b, string(d.Writer))
	b = binary.BigEndian.AppendUint64(b, uint64(d.Sequence))
	b = appendString(b, string(d.SignedName))
	b = appendString(b, string(e.NewName))
	if !e.Legacy {
		b = binary.BigEndian.AppendUint64(b, uint64(e.ReadersAt))
		b = binary.BigEndian.AppendUint64(b, uint64(e.KeyAt))
	}
	return b
}

func appendString(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}

func appendBytes(b, s []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}

// UnmarshalEntry decodes an entry encoded by [Entry.Marshal]. It checks the
// structure only (lengths, limits, known operation, attribute and packing
// values, no trailing bytes), not names, signatures or rights; errors are of
// kind Invalid. Empty byte slices decode as nil.
func UnmarshalEntry(data []byte) (*Entry, error) {
	const op spindle.Op = "dirlog.UnmarshalEntry"
	if len(data) > MaxEntrySize {
		return nil, spindle.E(op, spindle.Invalid, fmt.Sprintf("entry is %d bytes, limit is %d", len(data), MaxEntrySize))
	}
	d := decoder{b: data}
	e := d.entry()
	if d.err == nil && len(d.b) != 0 {
		d.err = fmt.Errorf("%d trailing bytes", len(d.b))
	}
	if d.err != nil {
		return nil, spindle.E(op, spindle.Invalid, fmt.Errorf("malformed entry: %w", d.err))
	}
	return e, nil
}

type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf(format, args...)
	}
}

func (d *decoder) take(n int, what string) []byte {
	if d.err != nil {
		return nil
	}
	if n < 0 || n > len(d.b) {
		d.fail("short data reading %s", what)
		return nil
	}
	s := d.b[:n:n]
	d.b = d.b[n:]
	return s
}

func (d *decoder) u8(what string) uint8 {
	s := d.take(1, what)
	if s == nil {
		return 0
	}
	return s[0]
}

func (d *decoder) u32(what string) uint32 {
	s := d.take(4, what)
	if s == nil {
		return 0
	}
	return binary.BigEndian.Uint32(s)
}

func (d *decoder) u64(what string) uint64 {
	s := d.take(8, what)
	if s == nil {
		return 0
	}
	return binary.BigEndian.Uint64(s)
}

// bytes reads a length-prefixed byte slice of at most max bytes; an empty
// slice is returned as nil.
func (d *decoder) bytes(max int, what string) []byte {
	n := d.u32(what + " length")
	if d.err != nil {
		return nil
	}
	if uint64(n) > uint64(max) {
		d.fail("%s is %d bytes, limit is %d", what, n, max)
		return nil
	}
	s := d.take(int(n), what)
	if len(s) == 0 {
		return nil
	}
	return append([]byte(nil), s...)
}

func (d *decoder) string(max int, what string) string {
	n := d.u32(what + " length")
	if d.err != nil {
		return ""
	}
	if uint64(n) > uint64(max) {
		d.fail("%s is %d bytes, limit is %d", what, n, max)
		return ""
	}
	return string(d.take(int(n), what))
}

func (d *decoder) entry() *Entry {
	e := &Entry{}
	switch string(d.take(len(entryMagic), "magic")) {
	case entryMagic:
	case entryMagicV1:
		e.Legacy = true
	default:
		d.fail("bad magic")
		return nil
	}
	e.Seq = int64(d.u64("sequence"))
	copy(e.Prev[:], d.take(len(e.Prev), "previous hash"))
	e.Time = spindle.Time(d.u64("time"))
	e.Writer = spindle.UserName(d.string(spindle.MaxUserNameLen, "writer"))
	e.Op = Operation(d.u8("operation"))
	if _, ok := opNames[e.Op]; !ok {
		d.fail("unknown operation %d", e.Op)
	}
	de := &e.Entry
	de.Name = spindle.PathName(d.string(MaxNameLen, "name"))
	de.Attr = spindle.Attribute(d.u8("attribute"))
	switch de.Attr {
	case spindle.AttrNone, spindle.AttrDirectory, spindle.AttrLink:
	default:
		d.fail("bad attribute %d", de.Attr)
	}
	de.Packing = spindle.Packing(d.u8("packing"))
	if de.Packing > spindle.EEPack {
		d.fail("unknown packing %d", de.Packing)
	}
	de.Time = spindle.Time(d.u64("entry time"))
	de.Size = int64(d.u64("size"))
	n := d.u32("block count")
	if n > MaxBlocks {
		d.fail("%d blocks, limit is %d", n, MaxBlocks)
	}
	// Each block takes at least 20 bytes, so a count the data cannot hold
	// is refused before anything is allocated for it.
	if d.err == nil && uint64(n)*20 > uint64(len(d.b)) {
		d.fail("short data reading %d blocks", n)
	}
	if d.err == nil && n > 0 {
		de.Blocks = make([]spindle.DirBlock, n)
		for i := range de.Blocks {
			bl := &de.Blocks[i]
			bl.Ref = spindle.Ref(d.string(maxRefLen, "block reference"))
			bl.Offset = int64(d.u64("block offset"))
			bl.Size = int64(d.u64("block size"))
		}
	}
	de.Packdata = d.bytes(MaxPackdata, "packdata")
	de.Link = spindle.PathName(d.string(MaxNameLen, "link"))
	de.Inline = d.bytes(MaxInline, "inline data")
	de.Writer = spindle.UserName(d.string(spindle.MaxUserNameLen, "entry writer"))
	de.Sequence = int64(d.u64("entry sequence"))
	de.SignedName = spindle.PathName(d.string(MaxNameLen, "signed name"))
	e.NewName = spindle.PathName(d.string(MaxNameLen, "new name"))
	if !e.Legacy {
		e.ReadersAt = int64(d.u64("readers' sequence"))
		e.KeyAt = int64(d.u64("key log size"))
		if e.ReadersAt < 0 || e.KeyAt < 0 {
			d.fail("negative readers' sequence %d or key log size %d", e.ReadersAt, e.KeyAt)
		}
	}
	e.Sig = d.bytes(MaxSignature, "signature")
	if d.err != nil {
		return nil
	}
	return e
}

// A Record is what a log stores for one entry: the entry's encoding and the
// host's notes on its decision: the writer's key that verified the
// signature, and the other logs it consulted, by their sequence numbers at
// that moment.
type Record struct {
	Entry []byte            // The entry, as Entry.Marshal encodes it.
	Key   spindle.PublicKey // The writer's key that verified it.
	Deps  []Dep             // The other logs the decision consulted.
}

// A Dep names another user's log, and how far into it, that a decision used.
type Dep struct {
	User spindle.UserName // Whose log.
	Seq  int64            // Its sequence number when the decision was taken.
}

const recordMagic = "SPDLR1"

// Marshal returns the record as a log stores it.
func (r *Record) Marshal() []byte {
	b := append([]byte(nil), recordMagic...)
	b = appendBytes(b, r.Entry)
	b = appendString(b, string(r.Key))
	b = binary.BigEndian.AppendUint32(b, uint32(len(r.Deps)))
	for _, d := range r.Deps {
		b = appendString(b, string(d.User))
		b = binary.BigEndian.AppendUint64(b, uint64(d.Seq))
	}
	return b
}

func unmarshalRecord(data []byte) (*Record, error) {
	d := decoder{b: data}
	if string(d.take(len(recordMagic), "record magic")) != recordMagic {
		return nil, errors.New("bad record magic")
	}
	r := &Record{Entry: d.bytes(MaxEntrySize, "entry")}
	r.Key = spindle.PublicKey(d.string(maxKeyLen, "key"))
	n := d.u32("dependency count")
	if n > maxDeps {
		d.fail("%d dependencies, limit is %d", n, maxDeps)
	}
	for i := uint32(0); i < n && d.err == nil; i++ {
		u := spindle.UserName(d.string(spindle.MaxUserNameLen, "dependency user"))
		s := int64(d.u64("dependency sequence"))
		r.Deps = append(r.Deps, Dep{u, s})
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d trailing bytes", len(d.b))
	}
	if d.err != nil {
		return nil, d.err
	}
	return r, nil
}
