// Package dirlog holds each user's directory tree as a signed, hash-chained,
// append-only log of writer-signed operations, on one dir host.
//
// # Entries
//
// An [Entry] records one operation on one tree: its sequence number, the
// hash of the previous entry, a time, the writer, the operation (put,
// delete, mkdir, link, rename), the affected [spindle.DirEntry] and, for a
// rename, the new name. The writer's client builds the entry for the next
// sequence number and the current head hash, and signs the SHA-256 of its
// canonical, domain-separated encoding ([Entry.Sign]). The dir host
// assigns nothing: if the head moved meanwhile, [Server.Append] refuses the
// entry with a Transient error and the client re-reads the head and signs
// again ([Client] does this).
//
// Access and Group files travel inside the entry that writes them
// (DirEntry.Inline, at most [MaxInline] bytes), so rights can be decided
// from logs alone. The host appends only those that pass access.Check;
// replay reads those already in a log with the more lenient parsers, as
// they were read when appended.
//
// # Validity
//
// Whether an entry is valid is a deterministic function of the log prefix
// before it: its signature must verify against the writer's key, and the
// writer must hold the needed right under the Access and Group files in
// force at that point: create for a new name, write to overwrite, delete to
// remove, delete on the old and create on the new name to rename; Access and
// Group files are the owner's alone. A tree begins with the owner's mkdir of
// its root. A Group file owned by another user is read from that user's log
// on the same host. The host records, beside the entry, the writer's key
// that verified it and the sequence number of every other log it consulted,
// so that replay ([Server] at start-up) and [Audit] reproduce the decision
// exactly, also after the writer has rotated keys (given a key history).
//
// New names follow one more rule, checked when an entry is appended and
// not in replay: every name an entry brings into the tree (the name it
// puts, a link's target, a rename's destination) must pass
// [spindle.CheckName], so holds no control character and is valid UTF-8
// ([CheckNewNames]). An entry that was valid when it was written stays
// valid, so a log from before the rule opens as it was, and its owner can
// still delete or rename such a name. (The node also requires new names to
// be in Unicode NFC; see package spindle.)
//
// # Storage
//
// Each log is a sequence of records framed with a length and a CRC-32C,
// fsynced before [Server.Append] returns ([DiskStore], and [MemStore] for
// tests). [Server.AppendBatch] takes many entries of one tree at once and
// stores those that cannot affect each other's checks with one fsync
// (group commit); readers see entries only once they are durable. On start-up every log is re-read and every entry re-checked; a
// truncated or corrupted tail, or an entry that is no longer valid, is cut
// at the last valid entry, the cut bytes are kept beside the log for
// inspection, and the damage is logged and reported by [Server.Damage].
//
// # Reads
//
// Reads name the requesting user explicitly and follow Upspin's rules: a
// user with no right on a name learns nothing about it (Private); NotExist
// is reported only to users with some right on the name; a user with some
// right but not read gets the entry marked AttrIncomplete, without blocks
// or packdata; a write is refused with Permission to a user with some
// right on the name, Private to anyone else. Listing needs the list right:
// Glob searches only directories the user may list (one that may not be
// listed is Private), and Watch shows an item below the watched name only
// to a user who may list every directory on the way to it. Read alone
// fetches a file whose name the user knows. Errors about groups are told
// only to users who may know of the group, and no error or answer gives a
// log's position (its head, a sequence number) to a user without a right
// in the tree.
//
// Every entry a read returns carries what a reader needs to check, without
// trusting the host, that it belongs at its name ([spindle.DirEntry.Signed]):
// an Access or Group file or a link carries the signed entry that put it
// (a file's writer signs its name in the packdata instead), and an entry
// moved by renames carries each signed rename entry that moved it, oldest
// first, beside SignedName, the name its writer signed. Only a rename sets
// SignedName: the host refuses an entry whose writer set it, and, given
// [Config.CheckPut], checks the packing's signature of every file put.
//
// # Heads and the tree map
//
// [Server.Head] returns the log's head (user, sequence, entry hash, map
// root, time) signed by the dir host, so that readers can detect rollback
// and forks. The map root is the root of a sparse Merkle tree of the
// folded tree (see smt.go): from [MapKey] of each item's name to the hash
// of the signed entry that put it there (chained through [MovedValue]
// with every rename that moved it since); a deleted item is absent. It is
// a deterministic function of the log: [MapRoot] recomputes it from the
// entries alone, so an owner, a mirror or an auditor catches a host that
// signs a root its log does not give ([AuditReport] carries the root
// replay found). A [MapProof] proves against a root that a name maps to
// an entry (inclusion) or is absent (exclusion), with hashes only.
// [Server.LookupProved] answers a Lookup with such a proof against the
// signed head, and the signed entries the item's value is made of, which
// [Proved.Verify] checks.
package dirlog
