// Package fsys presents Spindle's namespace as a FUSE file system, the
// engine of "spin mount". It is a client of a [spindle.Client], like the
// spin command: DIR/ann@example.com/docs/report.pdf is the file
// ann@example.com/docs/report.pdf. The mount's root lists the client's own
// user; any other user's tree is entered by its name.
//
// # Never hangs
//
// Every operation has a deadline ([Config.Timeout]). A long transfer is
// bounded per block: a read waits at most the timeout for each block it
// needs, and a put fails only when no block has gone out for that long.
// When the node is gone an operation fails with EIO within the bound and
// the mount stays usable; it recovers by itself when the node returns,
// since the client reconnects and the tree watches are restarted.
//
// # Caching
//
// Directory entries and listings are cached in memory. While a tree's
// watch stream (see [spindle.Client.Watch]) is open, they stay valid until
// an event of that tree changes them (in the client's own tree, a file's
// event and the mount's own puts change the cached listing in place, so a
// name missing from it is known not to exist without asking), so another client's change shows
// within a second or two (the kernel's own cache of names and attributes
// lasts one second). A tree that cannot be watched is cached for one
// second. When the node cannot be reached, the last cached answer is
// served instead of an error, so directories listed before can still be
// listed.
//
// File contents are cached block by block on local disk, in plaintext, in
// a directory only the mount's user may open, bounded by
// [Config.CacheSize] (least recently used blocks go first). A file read
// before stays readable while the node is away.
//
// A file read from start to end is fetched ahead, as the client's own
// reads are. The kernel reads ahead too (8 MiB, raised from its default
// when the mount may), with several requests at once that arrive in any
// order; a request a few blocks ahead of the next one in order reads the
// blocks before it first and keeps them for the requests on their way,
// so that the client's reader is still read in order, each block once
// (TestSequentialReadInOrder).
//
// # Writes
//
// A file opened for writing is copied to a local staging file (only when
// it is written without being truncated first) and written there. A file
// written from its start is put as it is written: the put reads the
// staging file behind the writes. Otherwise it is put whole.
//
// Closing a file does not wait for its put (write-back). The file is
// noted in a journal beside its staging file (the target of a symbolic
// link, NAME.queued, naming the file and the version it was written
// over) and queued; 16 files are put at once, and a close waits
// while 64 are queued. fsync puts the file and returns only
// when it is stored. Until a queued file is stored, reads, stat and
// listings show its staged contents. A put that fails is logged, and the
// next open, write, fsync or close of the file reports it (EIO, or the
// errno of the kind that refused it); the staging file stays, and the
// put is tried again after the timeout while the node is unreachable.
// A later close of the file supersedes a queued one; a rename or unlink
// of a queued file acts after its put or cancels it. Unmounting waits for
// the queue while files are being stored; what it leaves, and what a
// killed mount left, the next mount of the same cache directory puts,
// beside the stored file, as NAME.conflict-N, if that changed since.
//
// Renaming onto or from an Access or Group file (an editor saving one:
// write a temporary file, rename it over) puts the text as "spin put"
// does, which re-shares the files it governs, and removes the source.
// A rename of a file whose contents wait to be put onto an existing file
// puts them at the new name, which replaces the old in one step. Other
// renames onto an existing file delete the target first (the tree has no
// replacing rename); the mount answers its own lookups of the target with
// the old entry until the rename is done, so its readers never see it
// missing. Spindle links are symbolic links, shown relative to the link's
// directory; hard links are refused (EPERM). Modes, owners and times
// cannot be changed; such requests succeed and change nothing.
//
// # Snapshots
//
// The root of the client's own tree has a read-only directory,
// .snapshots, of the tree's past states (see [client.Past]): one
// directory per day, YYYY-MM-DD, that has entries in the retained log,
// holding the tree at the end of that day, UTC; and seq-N, the tree
// after entry N, found by name but not listed. .snapshots itself is not
// listed either, so that a walk of the tree does not walk every state.
// Every change under it is EROFS. It is the mount's own: the tree holds
// no such item, and an item of that name stored there is hidden.
//
// # Errors
//
// Each error kind of package spindle becomes one errno:
//
//	NotExist, Private, BrokenLink    ENOENT
//	Permission, CannotDecrypt        EACCES
//	Exist                            EEXIST
//	IsDir                            EISDIR
//	NotDir                           ENOTDIR
//	NotEmpty                         ENOTEMPTY
//	Invalid                          EINVAL
//	IO, Transient, a deadline passed EIO
//	Integrity, Damaged, Internal     EIO
//	Other                            EIO
//
// Private is ENOENT, as for NotExist, so that names cannot be probed.
// A rename between two users' trees is EXDEV, so mv copies instead.
package fsys
