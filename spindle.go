package spindle

import (
	"context"
	"time"
)

// A UserName is an email-like name, ann@example.com, unique in Spindle's
// one global namespace. See [ParseUser] for its syntax.
type UserName string

// A PathName names a file or directory: ann@example.com/dir/file. The root
// of a user's tree is ann@example.com/ (the only path with a trailing
// slash). See [Parse] for its syntax.
type PathName string

// A Ref is the content address of a block: the string form of a CIDv1
// (codec raw, multihash sha2-256) of the block's stored bytes.
type Ref string

// A PublicKey is a user's P-256 public key in its text form, a single line
// that a person can paste: "p256:" followed by the unpadded base64url
// encoding of the 65-byte uncompressed SEC 1 point. See [ParsePublicKey].
type PublicKey string

// A PeerAddr is a dialable address of a node: a multiaddr ending in
// /p2p/<peer ID>, or a bare peer ID where the address is learnt elsewhere.
type PeerAddr string

// A Signature is an ECDSA P-256 signature in ASN.1 DER form.
type Signature []byte

// MaxBlockSize is the largest plaintext held in one block. A stored block is
// at most MaxBlockSize plus its packing's overhead.
const MaxBlockSize = 1 << 20

// MaxStoredBlockSize bounds the bytes of any stored block, whatever its
// packing; stores refuse larger blocks.
const MaxStoredBlockSize = MaxBlockSize + 4096

// Time is a moment as nanoseconds since the Unix epoch, in full 64 bits.
type Time int64

// Now returns the current time.
func Now() Time { return Time(time.Now().UnixNano()) }

// Go returns t as a time.Time.
func (t Time) Go() time.Time { return time.Unix(0, int64(t)) }

// A Packing names the way a file's contents are stored. The numbers are part
// of the stored format and never change.
type Packing uint8

// The packings.
const (
	UnknownPack     Packing = 0 // Not a valid packing.
	PlainPack       Packing = 1 // Plain text; the entry is signed by the writer.
	EEIntegrityPack Packing = 2 // Plain text with signed block hashes.
	EEPack          Packing = 3 // End-to-end encrypted with AES-256-GCM; the default.
)

var packingNames = map[Packing]string{
	PlainPack:       "plain",
	EEIntegrityPack: "eeintegrity",
	EEPack:          "ee",
}

// String returns the packing's name: "plain", "eeintegrity" or "ee".
func (p Packing) String() string {
	if s, ok := packingNames[p]; ok {
		return s
	}
	return "unknown"
}

// ParsePacking returns the packing with the given name.
func ParsePacking(name string) (Packing, error) {
	for p, s := range packingNames {
		if s == name {
			return p, nil
		}
	}
	return UnknownPack, E(Op("spindle.ParsePacking"), Invalid, "unknown packing "+quote(name)+" (want ee, eeintegrity or plain)")
}

// An Attribute says what kind of item a DirEntry describes.
type Attribute uint8

// The attributes. AttrIncomplete marks an entry returned to a user who may
// list but not read it: its blocks and packdata are withheld.
const (
	AttrNone       Attribute = 0 // A regular file.
	AttrDirectory  Attribute = 1
	AttrLink       Attribute = 2
	AttrIncomplete Attribute = 4
)

// IsDir reports whether the entry is a directory.
func (a Attribute) IsDir() bool { return a&AttrDirectory != 0 }

// IsLink reports whether the entry is a link.
func (a Attribute) IsLink() bool { return a&AttrLink != 0 }

// IsIncomplete reports whether blocks and packdata were withheld.
func (a Attribute) IsIncomplete() bool { return a&AttrIncomplete != 0 }

// A DirBlock is one block of a file: where its plaintext lies in the file and
// where its stored bytes can be found.
type DirBlock struct {
	Ref    Ref   // Content address of the stored (packed) bytes.
	Offset int64 // Offset of the block's plaintext within the file.
	Size   int64 // Length of the block's plaintext.
}

// A DirEntry describes a file, directory or link.
type DirEntry struct {
	Name PathName // Clean path name.
	// SignedName is the name the writer signed, if the entry has since
	// been moved by a rename (of it or of a directory above it); empty
	// when it is Name. Readers verify the writer's signature against it.
	SignedName PathName
	Attr       Attribute // File, directory or link.
	Packing    Packing   // How the blocks are packed; UnknownPack for directories.
	Time       Time      // Time of the last write.
	Size       int64     // Plaintext size of a file.
	Blocks     []DirBlock
	Packdata   []byte   // Packing-specific: writer's signature, wrapped keys, commitments.
	Link       PathName // Target of a link.
	Inline     []byte   // Contents of Access and Group files, which travel in the entry itself (never encrypted).
	Writer     UserName // Who wrote, and signed, this entry.
	Sequence   int64    // Sequence number of the last change, in the tree's log.
	// Signed holds, in a dir host's answer, the signed log entries (in
	// package dirlog's encoding) by which a reader checks the entry's
	// name without trusting the host: for an Access or Group file the
	// owner's entry that put its text, and for an entry moved since its
	// writer signed it, every rename that moved it, oldest first. It is
	// never part of a log entry; hosts ignore it in what they are sent.
	Signed [][]byte
}

// A User is a user's key record, as the key cluster holds it. Every change
// to a record is signed: a new record by its own key, an update by the key of
// the record it replaces (or, for a +suffix user, by its base user's key).
// See package keyraft for the signed encoding.
type User struct {
	Name      UserName
	PublicKey PublicKey
	DirHosts  []PeerAddr // Nodes that hold the user's directory log; the first sequences it.
	Version   int64      // 1 for a new record, one more than the record it replaces.
	Prev      []byte     // Hash of the record this one replaces; empty for version 1.
	// DirSeq is set by a record that replaces the user's key: the
	// sequence number of the user's own tree log when the key was
	// replaced. Entries of that tree signed with an earlier key are valid
	// only up to it, so a stolen key its owner rotated away signs nothing
	// a reader accepts. Later versions carry it over; 0 before any rotation.
	DirSeq int64
	// DirQuorum is how many of the user's dir hosts other than a head's
	// signer must cosign a head of the user's tree for a reader to
	// accept it (see dirlog.Head.Cosigs): each replayed the log itself,
	// so a host that signs a head over a map its log does not give is
	// caught by a reader that has never seen the tree. 0, the default,
	// asks for none; it is below len(DirHosts).
	DirQuorum int
	// Keep is how long, in seconds, the user's dir hosts keep every
	// earlier state of the user's tree readable (see dirlog/host's
	// Config.Retain): the log entries of that window are not compacted and
	// the blocks they reach stay leased. 0 leaves it to each host's
	// default; KeepNone keeps only the current state.
	Keep int64
	// Pins are the user's named snapshots, sorted by name: states of the
	// user's tree its dir hosts keep readable, with the blocks their
	// files reach, for as long as the record names them.
	Pins      []Pin
	SignedBy  UserName  // Whose key signed the change: Name itself or its base user.
	Signature Signature // Signature by SignedBy's current key over the record.
}

// A Pin names a state of a user's tree, the one after entry Seq of its
// log: a named snapshot (see User.Pins).
type Pin struct {
	Name string
	Seq  int64
}

// KeepNone, as a key record's Keep, asks dir hosts to keep no earlier
// state of the user's tree.
const KeepNone int64 = -1

// A BlockStore stores and retrieves blocks by their content address. Every
// implementation verifies the hash on Put, and Get never returns bytes
// whose hash does not match ref, reporting Integrity instead: a store
// checks the hash again, or a checksum it recorded when it checked the
// hash at Put.
// Implementations are safe for concurrent use and never keep or share the
// slices they are given or return.
type BlockStore interface {
	// Get returns the stored bytes of the block. Error kinds: NotExist,
	// Integrity (the copy was bad and has been discarded), IO, Invalid.
	Get(ctx context.Context, ref Ref) ([]byte, error)
	// Put stores data, durably before it returns, and returns its address.
	// Putting a block that is already present is not an error.
	Put(ctx context.Context, data []byte) (Ref, error)
}

// A BlockLister enumerates and removes blocks, for garbage collection and
// repair. It is separate from BlockStore because remote stores do not offer it.
type BlockLister interface {
	// List calls fn for every block held, in no particular order, until fn
	// returns an error, which List then returns.
	List(ctx context.Context, fn func(Ref) error) error
	// Delete removes a block. Deleting an absent block is not an error.
	Delete(ctx context.Context, ref Ref) error
}

// A KeyServer maps user names to key records.
type KeyServer interface {
	// Lookup returns the record of the named user. Error kinds: NotExist, Invalid.
	Lookup(ctx context.Context, name UserName) (*User, error)
	// Put registers or updates a record. The record must carry a signature
	// as the key cluster's policy requires (see package keyraft): Invalid
	// for a malformed record, Permission for a bad signature or authority,
	// Exist when the name is held under another key, Transient when the
	// cluster cannot commit the change now.
	Put(ctx context.Context, u *User) error
}

// A DirServer holds directory trees for the user it was opened for. Every
// method is checked against the Access files in force.
type DirServer interface {
	// Lookup returns the entry for name. A user with some right but not
	// read gets an entry marked AttrIncomplete.
	Lookup(ctx context.Context, name PathName) (*DirEntry, error)
	// Put creates or replaces the entry, which the writer has signed.
	Put(ctx context.Context, entry *DirEntry) (*DirEntry, error)
	// Delete removes the entry; a directory must be empty.
	Delete(ctx context.Context, name PathName) (*DirEntry, error)
	// Glob returns the entries matching pattern (path.Match syntax per element).
	Glob(ctx context.Context, pattern string) ([]*DirEntry, error)
	// WhichAccess returns the Access file that governs name, or nil if none does.
	WhichAccess(ctx context.Context, name PathName) (*DirEntry, error)
}

// A Signer holds a user's private key and acts with it. It never reveals the key.
type Signer interface {
	// UserName returns the user whose key this is.
	UserName() UserName
	// PublicKey returns the public half of the current key.
	PublicKey() PublicKey
	// Sign signs the SHA-256 digest of a message.
	Sign(digest []byte) (Signature, error)
}

// SignedPath returns the name the writer signed: SignedName if set, else Name.
func (e *DirEntry) SignedPath() PathName {
	if e.SignedName != "" {
		return e.SignedName
	}
	return e.Name
}
