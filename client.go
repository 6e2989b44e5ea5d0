package spindle

import (
	"context"
	"io"
	"strings"
)

// A File is an open file, read block by block and verified as it is read.
// It never holds the whole file in memory.
type File interface {
	io.Reader
	io.ReaderAt
	io.Seeker
	io.Closer
	// Entry returns the directory entry the file was opened from.
	Entry() *DirEntry
}

// A Client is everything a user does with Spindle. It holds the user's keys,
// packs, unpacks, signs and verifies itself, and reaches the network through
// one peer, which can delay or refuse but can neither read nor forge.
// It is the only interface the spin command uses. Names may be given
// unclean; "@" alone or as the first element means the user's own root.
type Client interface {
	// User returns the name of the user the client acts for.
	User() UserName

	// Put stores the contents of r as the file name with the given
	// packing (UnknownPack means the user's default), replacing any file
	// there, and reports progress in bytes to the optional progress func.
	// Putting an Access or Group file also re-wraps the keys of the files
	// it governs; what of that could not be done (a group that does not
	// exist, a file that could not be re-wrapped) is returned as a
	// *Warning together with the stored entry.
	Put(ctx context.Context, name PathName, r io.Reader, packing Packing, progress func(n int64)) (*DirEntry, error)
	// Open opens the file name for reading, following links.
	Open(ctx context.Context, name PathName) (File, error)
	// Lookup returns the entry for name; links are followed only if follow is set.
	Lookup(ctx context.Context, name PathName, follow bool) (*DirEntry, error)
	// Glob returns the entries matching pattern, whose elements may use path.Match syntax.
	Glob(ctx context.Context, pattern string) ([]*DirEntry, error)
	// MakeDirectory creates a directory; its parent must exist.
	MakeDirectory(ctx context.Context, name PathName) (*DirEntry, error)
	// Delete removes a file, link or empty directory.
	Delete(ctx context.Context, name PathName) error
	// PutLink creates a link at linkName pointing to target.
	PutLink(ctx context.Context, target, linkName PathName) (*DirEntry, error)
	// Rename moves a file, link or whole directory within the user's tree.
	Rename(ctx context.Context, oldName, newName PathName) error
	// WhichAccess returns the Access file governing name, or nil if none does.
	WhichAccess(ctx context.Context, name PathName) (*DirEntry, error)
	// Watch streams the changes under name from sequence fromSeq on,
	// until ctx is cancelled.
	Watch(ctx context.Context, name PathName, fromSeq int64) (<-chan Event, error)

	// Share reports, and with fix repairs, which readers hold wrapped keys
	// for the files at name (recursively if recursive) against the readers
	// the Access files grant.
	Share(ctx context.Context, name PathName, recursive, fix bool) ([]ShareReport, error)
	// Readers returns the users who hold wrapped keys for the file name
	// (AllUsers if anyone may unwrap it). Holders it cannot name, and the
	// groups it could not read to name them, are reported in a *Warning
	// returned together with the users it did name.
	Readers(ctx context.Context, name PathName) ([]UserName, error)

	// Signup registers the user, with its key and the client's node as
	// dir host, in the key cluster. Repeating it is harmless.
	Signup(ctx context.Context) error
	// SignupSuffixed registers, as its base user, the +suffix user whose
	// key s holds (ann+camera@example.com for ann@example.com), with the
	// client's node as dir host; the new user then signs up as itself.
	// A name registered with another key is Exist; a name that is not a
	// +suffix user of the client's user is Invalid.
	SignupSuffixed(ctx context.Context, s Signer) error
	// LookupUser returns a user's key record.
	LookupUser(ctx context.Context, name UserName) (*User, error)

	// Close releases the client's connections.
	Close() error
}

// An Event reports one change to a tree.
type Event struct {
	Entry  *DirEntry // The entry after the change; for a delete, its last state.
	Delete bool      // The entry was removed.
	Err    error     // Set on the last event if the watch failed.
}

// A ShareReport tells, for one file, who can read it and who holds keys.
// AllUsers among Readers means the Access file lets anyone read it; among
// Wrapped, that its key is wrapped for all, so anyone can decrypt it.
type ShareReport struct {
	Name     PathName
	Readers  []UserName // Users the Access file grants read.
	Wrapped  []UserName // Users holding a wrapped key.
	Missing  []UserName // Readers without a wrapped key.
	Extra    []UserName // Key holders who are no longer readers.
	Fixed    bool       // The wraps were repaired.
	Unknowns []string   // Key holders the client could not name.
	// Groups holds, for each group that grants read but could not be
	// loaded, an error naming it; its members are not among Readers. A
	// group that does not exist grants nothing. While another cannot be
	// read, its members are unknown: no key is removed, and the holders
	// who may be its members are listed in Unsure instead of Extra.
	Groups []error
	Unsure []UserName
	// Domains holds, for each *@domain that grants read, the users the
	// key cluster has registered in that domain now: under its open
	// policy, whoever registered a name there. They are among Readers.
	Domains map[string][]UserName
	// Err, if set, says why the file could not be checked or repaired;
	// the other fields hold what was found before.
	Err error
}

// A Warning is returned by a Client method, together with its full
// result, when the operation took effect but something that follows from
// it could not be done: an Access file was stored, but it names a group
// that does not exist, whose members therefore get no keys. Each problem
// is an error naming its path. Callers that ask only whether the
// operation took effect use errors.As; a Warning has no Kind of its own.
type Warning struct {
	Problems []error
}

func (w *Warning) Error() string {
	s := make([]string, len(w.Problems))
	for i, p := range w.Problems {
		s[i] = p.Error()
	}
	return "warning: " + strings.Join(s, "; ")
}
